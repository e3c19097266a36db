// WorkerCgroup: a cgroup v2 that holds every worker of one launch and
// everything they start, so that no descendant outlives its worker group
// or ddprun — also one that double-forked and called setsid() to leave the
// worker's process group (docs/self-healing.md).
//
// Made under this process's own cgroup on the cgroup2 mount
// (<mount><own cgroup>/ddprun-<pid>-<random>, never an existing one).
// Workers join it between fork and exec (procsPath()); whether they may
// (permissions, a parent cgroup's controllers) shows in the first worker
// (holds()), not in a probe process: a migration can cost milliseconds,
// and a launch pays it only for its workers. cgroup.kill ends everything
// in it at once. Where no such cgroup can be made (no cgroup2 mount, no
// write access, a kernel without cgroup.kill) create() returns nullptr and
// says why.
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

  const std::string& path() const { return path_; }
  // A process that writes "0" here moves itself into the cgroup.
  const std::string& procsPath() const { return procs_; }
  const std::string& killPath() const { return kill_; }
  const std::string& eventsPath() const { return events_; }

  // Whether process `pid` is in the cgroup.
  bool holds(pid_t pid) const;
  // The pids in the cgroup now.
  std::vector<int> members() const;
  // SIGKILLs everything in it (cgroup.kill).
  void killAll();

  // Moves the calling process into the cgroup whose cgroup.procs is
  // `procsFile`; false when refused. Async-signal-safe (a child between
  // fork and exec calls it).
  static bool enter(const char* procsFile);

  // Kills everything in the cgroup `dir` (its cgroup.kill), waits until it
  // is empty — woken by the kernel's notification on cgroup.events, at most
  // `timeoutMs` — and removes it. Async-signal-safe (no allocation): the
  // guardian calls it in its forked process, the destructor in the agent.
  static void killAndRemove(const char* dir, const char* killFile, const char* eventsFile,
                            int timeoutMs);

 private:
  WorkerCgroup(std::string path, std::string relative);

  std::string path_;
  std::string relative_;  // as /proc/<pid>/cgroup shows it
  std::string procs_;
  std::string kill_;
  std::string events_;
};

}  // namespace ddprun::agent
