// OrphanGuard: makes sure no worker process group outlives the agent, even
// when the agent is killed with SIGKILL.
//
// At construction it forks a tiny guardian process that holds the read end
// of a pipe. The agent registers each worker's process group; when the
// agent dies for any reason the pipe's write end closes, the guardian reads
// EOF and SIGKILLs every group still registered, then exits. The guardian
// ignores terminal signals and holds no other descriptor of the agent.
//
// Descendants that leave their worker's process group (a daemon that
// double-forks and calls setsid()) are caught too: every worker joins a
// cgroup v2 of this launch (WorkerCgroup) that the agent empties with
// cgroup.kill when a worker group ends, and the guardian empties when the
// agent dies. Where no such cgroup can be made, the agent is the child
// subreaper instead: orphaned descendants become its children, and
// killLeftovers() kills and reaps them when a group ends; only a SIGKILL
// of the agent itself then lets such a daemon survive (notice() says so).
//
// Construct it before the agent starts any thread: the guardian is a fork
// without exec and uses only async-signal-safe calls.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <sys/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/workers/worker_cgroup.h"

namespace ddprun::agent {

// A process the workers left behind, which ddprun killed.
struct LeftoverProcess {
  pid_t pid = 0;
  std::string name;  // from /proc/<pid>/comm, read before the kill
};

class OrphanGuard {
 public:
  OrphanGuard();
  // Tells the guardian to stop (nothing registered is killed) and reaps it.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  void watch(pid_t processGroup);
  void unwatch(pid_t processGroup);
  // A child of the agent that is no orphan (the preload zygote): neither
  // killed nor reaped as a leftover.
  void keepChild(pid_t pid) { keptChildren_.insert(pid); }
  void forgetChild(pid_t pid) { keptChildren_.erase(pid); }
  pid_t guardianPid() const { return guardian_; }

  // The cgroup workers join between fork and exec, or nullptr.
  const WorkerCgroup* cgroup() const { return cgroup_.get(); }
  // A fresh cgroup for a new worker group's workers, or "" (no cgroup, or
  // it could not be made: then the subreaper, with the notice).
  std::string beginGroup();
  // Checks with a launch's first worker that workers can join the cgroup;
  // if not, drops it for the subreaper (and says so). Later calls do nothing.
  void confirmCgroup(pid_t worker);
  // Empty, or one line on what is not guaranteed here and why.
  const std::string& notice() const { return notice_; }

  // Once a worker group has ended: SIGKILLs every process its workers left
  // behind (the cgroup's members, or the agent's adopted children) and
  // returns those that had left the workers' process groups
  // (`workerGroups`; the rest are stragglers already being killed).
  std::vector<LeftoverProcess> killLeftovers(const std::set<pid_t>& workerGroups);
  // Subreaper mode: reaps adopted children (not in `keep`) that exited.
  void reapAdopted(const std::set<pid_t>& keep);

 private:
  void send(int message);
  void useSubreaper(const std::string& whyNot);
  std::vector<pid_t> adoptedChildren(const std::set<pid_t>& keep) const;

  std::unique_ptr<WorkerCgroup> cgroup_;
  bool cgroupConfirmed_ = false;
  std::string notice_;
  std::set<pid_t> keptChildren_;
  int writeFd_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace ddprun::agent
