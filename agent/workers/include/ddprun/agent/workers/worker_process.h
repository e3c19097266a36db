// WorkerProcess: one spawned worker.
//
// Spawned with clone3 — directly inside the launch's cgroup when there is
// one (CLONE_INTO_CGROUP: moving a process into a cgroup afterwards waits
// for an RCU grace period, milliseconds per attempt) — in its own process
// group, with PR_SET_PDEATHSIG (checked after the clone for the race where
// the agent died first), default signal dispositions, and no descriptor of
// the agent but its stdin and the two output pipes (or terminals: --tty). A CpuPlacement
// (--numa_binding) is applied before exec, so every thread the program
// starts inherits it.
// With --preload a zygote forks it instead (SpawnOptions::forker): the same
// setup, done by the zygote's child, which the agent waits for alike.
// Its exit is observed through a pidfd on the agent's io_context.
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the process handle and the read ends of its pipes.
#pragma once

#include <sys/ioctl.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include "ddprun/agent/core/outcome.h"
#include "ddprun/agent/workers/process_v2.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::agent {

// Where a worker may run and allocate (--numa_binding).
struct CpuPlacement {
  std::vector<int> cpus;  // empty: the agent's own affinity
  int memoryNode = -1;    // NUMA node preferred for memory; -1: the default policy
  std::string cgroup;     // cgroup v2 directory the worker is born in; empty: the agent's
};

// A worker another process forks for the agent (--preload's zygote): the
// child is the agent's own, set up as below, and closes `reportFd` when it
// runs the program or writes why it could not.
struct ForkRequest {
  const std::vector<std::string>& argv;
  const std::vector<std::string>& env;
  const CpuPlacement& placement;
  int stdoutFd;  // the write ends of the worker's output pipes
  int stderrFd;
  int reportFd;
};
// Returns the child's pid, or nullopt when it cannot fork now (the worker
// is then exec'd as usual).
using Forker = std::function<std::optional<pid_t>(const ForkRequest&)>;

struct SpawnOptions {
  // Forks the worker instead of exec'ing it here; null: exec.
  const Forker* forker = nullptr;
  // The child's stdout and stderr are the agent's stderr (no pipes).
  bool outputToAgentStderr = false;
  // The child's stdout / stderr is a terminal of its own of this window
  // size (WorkerTerminal) instead of a pipe; where none can be had, a pipe
  // (said once).
  std::optional<winsize> stdoutTerminal;
  std::optional<winsize> stderrTerminal;
  // A descriptor the child keeps (at the same number, close-on-exec
  // cleared); -1: none.
  int passFd = -1;
};

class WorkerProcess {
 public:
  // Starts `argv` (argv[0] an absolute path) with exactly `env`. Throws
  // ddprun::Error naming the program and the cause when it cannot be
  // started (including running out of descriptors for its pipes).
  WorkerProcess(boost::asio::io_context& io, const std::vector<std::string>& argv,
                const std::vector<std::string>& env, const CpuPlacement& placement = {},
                const SpawnOptions& options = {});
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` to the worker's whole process group (ESRCH is ignored).
  void signalGroup(int sig) const;
  // Calls `onExit` once, when the worker exits.
  void waitForExit(std::function<void(ExitStatus)> onExit);

  boost::asio::readable_pipe& stdoutPipe() { return stdout_; }
  boost::asio::readable_pipe& stderrPipe() { return stderr_; }

 private:
  // Clones and execs; returns the child's pid (throws on failure).
  pid_t execChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const CpuPlacement& placement, const SpawnOptions& options, int out, int err);
  // Asks the forker; nullopt when it cannot fork now.
  std::optional<pid_t> forkChild(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env, const CpuPlacement& placement,
                                 const Forker& forker, int out, int err);

  boost::asio::readable_pipe stdout_;
  boost::asio::readable_pipe stderr_;
  boost::process::v2::process_handle handle_;
  pid_t pid_ = -1;
};

}  // namespace ddprun::agent
