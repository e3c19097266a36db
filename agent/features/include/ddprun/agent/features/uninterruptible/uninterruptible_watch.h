// UninterruptibleWatch: TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (torchrun
// 2.13+). A worker that stays in uninterruptible sleep (state D in
// /proc/<pid>/stat: a wedged driver, a dead NFS server, a GPU that stopped
// answering) for the timeout makes the node unhealthy: the agent stops the
// workers and does not restart them, since a new worker would meet the
// same device. Only the worker processes themselves are watched (their
// children and threads are not), as torchrun does.
//
// Sampled every min(timeout / 4, 1 s) (at least 50 ms), only while the
// timeout is set; the time in D state is continuous from the first sample
// that saw it, and leaving D state starts it again.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

class UninterruptibleWatch {
 public:
  using WorkersFn = std::function<std::vector<WatchedWorker>()>;
  // The first worker found past the timeout, and how long it has been in D.
  using StuckFn = std::function<void(const WatchedWorker&, std::chrono::milliseconds inD)>;
  // A worker seen entering D state (once per stay), for the log.
  using EnteredFn = std::function<void(const WatchedWorker&)>;

  UninterruptibleWatch(boost::asio::io_context& io, std::chrono::milliseconds timeout,
                       WorkersFn workers, EnteredFn onEntered, StuckFn onStuck);
  ~UninterruptibleWatch();
  UninterruptibleWatch(const UninterruptibleWatch&) = delete;
  UninterruptibleWatch& operator=(const UninterruptibleWatch&) = delete;

 private:
  void arm();
  void sample();

  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds period_;
  WorkersFn workers_;
  EnteredFn onEntered_;
  StuckFn onStuck_;
  boost::asio::steady_timer timer_;
  std::map<pid_t, std::chrono::steady_clock::time_point> inDSince_;
  bool fired_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ddprun::agent
