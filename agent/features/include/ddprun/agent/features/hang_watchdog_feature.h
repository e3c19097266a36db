// HangWatchdogFeature (--watchdog_timeout): for each attempt a HangWatchdog
// over the running workers; when it finds a hang, the feature names the rank
// that stopped first (with the others' last progress and, for Python
// workers, where each one waits), notes that cause for the worker's failure
// report and SIGKILLs it. The watchdog ends when the group is being stopped
// (it would only blame a worker that is stopping already).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/running_workers.h"
#include "ddprun/agent/features/hang_watchdog.h"

namespace ddprun::agent {

class HangWatchdogFeature : public LifecycleHook {
 public:
  HangWatchdogFeature(boost::asio::io_context& io, std::chrono::milliseconds timeout,
                      RunningWorkers& workers);

  // Told how long the culprit had been stalled when a hang is found.
  void whenHangFound(std::function<void(double stalledSeconds)> then) {
    hangFound_ = std::move(then);
  }

  void attemptStarted(const Attempt&) override;
  void attemptStopping(const Attempt&, int) override { watchdog_.reset(); }
  void attemptEnded(const Attempt&, const GroupOutcome&) override { watchdog_.reset(); }
  void exiting(const NodeExit&) override { watchdog_.reset(); }

 private:
  void onHang(const HangReport& report);

  boost::asio::io_context& io_;
  const std::chrono::milliseconds timeout_;
  RunningWorkers& workers_;
  std::unique_ptr<HangWatchdog> watchdog_;
  std::function<void(double)> hangFound_;
};

}  // namespace ddprun::agent
