// UninterruptibleFeature (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT): for
// each attempt an UninterruptibleWatch over the running workers. A worker
// that enters D state is named; one that stays there past the timeout makes
// the node unhealthy (NodeLifecycle::markUnhealthy: no restart), is noted as
// its failure's cause with where it waits, and is SIGKILLed. The watch ends
// with the attempt.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/uninterruptible/uninterruptible_watch.h"

namespace ddprun::agent {

class UninterruptibleFeature : public Feature {
 public:
  UninterruptibleFeature(boost::asio::io_context& io, std::chrono::milliseconds timeout,
                         RunningWorkers& workers, LifecycleInputs& lifecycle);

  void attemptStarted(const Attempt&) override;
  void attemptEnded(const Attempt&, const GroupOutcome&) override { watch_.reset(); }
  void exiting(const NodeExit&) override { watch_.reset(); }

 private:
  void onEntered(const WatchedWorker& worker);
  void onStuck(const WatchedWorker& worker, std::chrono::milliseconds inD);

  boost::asio::io_context& io_;
  const std::chrono::milliseconds timeout_;
  RunningWorkers& workers_;
  LifecycleInputs& lifecycle_;
  std::unique_ptr<UninterruptibleWatch> watch_;
};

}  // namespace ddprun::agent
