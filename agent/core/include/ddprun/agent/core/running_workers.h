// RunningWorkers: the running attempt's workers as a feature sees them (the
// hang watchdog, the D-state watch, file timers): who they are, which worker
// a process belongs to, a way to say why one is about to be killed (its
// failure report shows it), and the one way a feature kills a worker. The
// workers' room implements it (WorkerGroupRunner); between attempts there
// are no workers and every question has an empty answer.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

class RunningWorkers {
 public:
  virtual ~RunningWorkers() = default;
  // The workers not reaped yet; empty between attempts.
  virtual std::vector<WatchedWorker> watched() const = 0;
  // The local rank of the live worker `pid` is, or descends from.
  virtual std::optional<int> localRankOf(int pid) const = 0;
  // The global rank of the running attempt's `localRank`.
  virtual int rankOf(int localRank) const = 0;
  // Why the worker of `localRank` is about to fail; nothing between attempts.
  virtual void noteCause(int localRank, std::string cause,
                         std::vector<std::string> details = {}) = 0;
  // Sends `signal` to `pid` when it is one of the live workers or descends
  // from one (a pid reused by another process is never signalled); false
  // when it is not, or is gone.
  virtual bool signal(int pid, int signal) = 0;
};

}  // namespace ddprun::agent
