// JoinProgress: while this node waits for its rendezvous round, says how
// the round is forming, e.g.
//
//   ddprun: waiting for nodes: 3 of 4 joined (min 2), last call in 12 s
//
// On a terminal one status line is rewritten in place every second (and
// erased when the wait ends); otherwise a line is printed every `interval`
// (DDPRUN_PROGRESS_INTERVAL, 10 s). Quick joins print nothing: the first
// line comes after one interval. A zero interval prints nothing at all.
// Nothing is printed once the join's deadline has passed: the round is
// failing then, and the error that follows says what was missing (a status
// asked for just before the deadline may already show this node gone).
//
// Thread-safety: the status function runs on the object's own thread and
// must be safe to call there; construct and destroy on one thread.
// Ownership: owns its thread; the destructor stops and joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::agent {

// The progress line (without "ddprun: " or a newline) for `status`, or, with
// no status (the store is not reachable yet), for waiting on `endpoint`.
std::string formatJoinProgress(const std::optional<rendezvous::protocol::RendezvousStatus>& status,
                               const std::string& endpoint, std::chrono::seconds waited);

class JoinProgress {
 public:
  // `status` returns the round's state, or nullopt while not connected; an
  // exception it throws shows as "no answer" and the next tick tries again.
  using StatusFn = std::function<std::optional<rendezvous::protocol::RendezvousStatus>()>;

  JoinProgress(StatusFn status, std::string endpoint, bool terminal,
               std::chrono::milliseconds interval);
  ~JoinProgress();
  JoinProgress(const JoinProgress&) = delete;
  JoinProgress& operator=(const JoinProgress&) = delete;

  // The join was sent and fails at `deadline` (any thread).
  void setDeadline(std::chrono::steady_clock::time_point deadline);

  // Whether stderr is a terminal that can rewrite a line in place.
  static bool stderrIsTerminal();

 private:
  void run();

  StatusFn status_;
  const std::string endpoint_;
  const bool terminal_;
  const std::chrono::milliseconds interval_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  bool lineShown_ = false;  // terminal: a status line is on screen
  std::thread thread_;
};

}  // namespace ddprun::agent
