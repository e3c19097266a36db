// OrphanGuard: makes sure no worker process group outlives the agent, even
// when the agent is killed with SIGKILL.
//
// At construction it forks a tiny guardian process that holds the read end
// of a pipe. The agent registers each worker's process group; when the
// agent dies for any reason the pipe's write end closes, the guardian reads
// EOF and SIGKILLs every group still registered, then exits. The guardian
// ignores terminal signals and holds no other descriptor of the agent.
//
// Construct it before the agent starts any thread: the guardian is a fork
// without exec and uses only async-signal-safe calls.
//
// Thread-safety: watch()/unwatch() from the agent's loop thread only.
#pragma once

#include <sys/types.h>

namespace ddprun::agent {

class OrphanGuard {
 public:
  OrphanGuard();
  // Tells the guardian to stop (nothing registered is killed) and reaps it.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  void watch(pid_t processGroup);
  void unwatch(pid_t processGroup);
  pid_t guardianPid() const { return guardian_; }

 private:
  void send(int message);

  int writeFd_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace ddprun::agent
