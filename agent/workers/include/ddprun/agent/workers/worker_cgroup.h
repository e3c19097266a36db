// WorkerCgroup: a cgroup v2 that holds every worker of one launch and
// everything they start, so that no descendant outlives its worker group
// or ddprun — also one that double-forked and called setsid() to leave the
// worker's process group (docs/self-healing.md).
//
// Made under this process's own cgroup on the cgroup2 mount: the launch's
// cgroup L = <mount><own cgroup>/ddprun-<pid>-<random> (never an existing
// one), holding no process itself, and for each worker group a fresh child
// L/group (beginGroup()). Workers are born in the group's cgroup
// (WorkerProcess clones them into it: no migration, no wait for an RCU
// grace period); whether that is allowed (permissions, a parent cgroup's
// controllers) shows in the first worker (holds()). cgroup.kill on the
// group ends everything the group started; on L, everything of the
// launch. The group's cgroup is made anew for every group because, on the
// kernels seen here (6.18), a child cloned into a cgroup after a
// cgroup.kill of that cgroup is killed at birth. Where no cgroup can be
// made (no cgroup2 mount, no write access, a kernel without cgroup.kill)
// create() returns nullptr and says why.
//
// Thread-safety: immutable after create(); killAll() from one thread.
// Ownership: removes its directory on destruction (killing what is left,
// waiting up to 1 s for the cgroup to empty).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ddprun::agent {

class WorkerCgroup {
 public:
  static std::unique_ptr<WorkerCgroup> create(std::string& whyNot);
  ~WorkerCgroup();
  WorkerCgroup(const WorkerCgroup&) = delete;
  WorkerCgroup& operator=(const WorkerCgroup&) = delete;

  // The launch's cgroup L and the current group's L/group.
  const std::string& path() const { return launch_.dir; }
  const std::string& groupPath() const { return group_.dir; }

  // A fresh, empty L/group for a new worker group (the previous one's
  // leftovers killed, the cgroup removed and made again); false when it
  // cannot be made.
  bool beginGroup();
  // Whether process `pid` is in the group's cgroup.
  bool holds(pid_t pid) const;
  // The pids in the group's cgroup now.
  std::vector<int> members() const;
  // SIGKILLs everything in the group's cgroup (cgroup.kill).
  void killAll();

  // Kills everything in the cgroup `dir` and below (its cgroup.kill),
  // waits until it is empty — woken by the kernel's notification on
  // cgroup.events, at most `timeoutMs` — and removes `child` (if any) and
  // `dir`. Async-signal-safe (no allocation): the guardian calls it in its
  // forked process, the agent when it is done.
  static void killAndRemove(const char* dir, const char* child, int timeoutMs);

 private:
  struct Files {
    explicit Files(std::string directory);
    std::string dir, procs, kill, events;
  };
  WorkerCgroup(std::string path, std::string relative);

  Files launch_;
  Files group_;
  std::string groupRelative_;  // as /proc/<pid>/cgroup shows it
};

}  // namespace ddprun::agent
