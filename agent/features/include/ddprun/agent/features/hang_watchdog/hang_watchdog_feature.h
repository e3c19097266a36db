// HangWatchdogFeature (--watchdog_timeout): for each attempt a HangWatchdog
// over the running workers; when it finds a hang, the feature names the rank
// that stopped first (with the others' last progress and, for Python
// workers, where each one waits), notes that cause for the worker's failure
// report, tells the other features (HangFound: the downtime's detection)
// and SIGKILLs it. The watchdog ends when the group is being stopped
// (it would only blame a worker that is stopping already).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/hang_watchdog/hang_watchdog.h"

namespace ddprun::agent {

class HangWatchdogFeature : public Feature {
 public:
  HangWatchdogFeature(boost::asio::io_context& io, std::chrono::milliseconds timeout,
                      RunningWorkers& workers, FactSink& facts);

  void attemptStarted(const Attempt&) override;
  void attemptStopping(const Attempt&, int) override { watchdog_.reset(); }
  void attemptEnded(const Attempt&, const GroupOutcome&) override { watchdog_.reset(); }
  void exiting(const NodeExit&) override { watchdog_.reset(); }

 private:
  void onHang(const HangReport& report);

  boost::asio::io_context& io_;
  const std::chrono::milliseconds timeout_;
  RunningWorkers& workers_;
  FactSink& facts_;
  std::unique_ptr<HangWatchdog> watchdog_;
};

}  // namespace ddprun::agent
