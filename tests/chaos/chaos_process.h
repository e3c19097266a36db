// The processes a chaos run watches: an agent or a daemon the harness
// started itself (StartedProcess, through pipes), or an agent a Slurm job
// step started (SupervisedProcess: `ddprun-chaos --supervise` runs it on
// its node and leaves its pid, output and end in files the harness reads).
// Both keep what it printed, what the harness sent it and how it ended;
// the harness's loop polls them.
//
// supervise() is `ddprun-chaos --supervise PREFIX -- PROGRAM ARGS...`: it
// runs PROGRAM with stdout and stderr in PREFIX.out and PREFIX.err, writes
// its pid to PREFIX.pid once started and "exit N" or "signal S" to
// PREFIX.status once it ended (each file whole, by rename), then ends the
// same way (it raises the same signal), so srun sees the task end as
// ddprun's. It ignores the signals Slurm sends every process of a step:
// they are PROGRAM's to handle.
//
// Thread-safety: one thread drives them.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "child_process.h"

namespace ddprun::chaos {

struct Process {
  int host = 0;
  std::string out;
  std::string err;
  std::size_t scanned = 0;  // of `out`, lines already parsed
  std::set<int> signalsSent;
  std::filesystem::path errorFile;
  bool ended = false;
  int code = 0;   // its exit code (128 + the signal when it died of one)
  int death = 0;  // the signal it died of, 0: it exited
  bool restartWhenEnded = false;

  virtual ~Process() = default;
  void signal(int sig) {
    signalsSent.insert(sig);
    deliver(sig);
  }
  // What a wait for it polls while it runs (nothing: poll it again soon).
  virtual void watch(std::vector<pollfd>& fds) const = 0;
  // Takes in its output; true when it has just ended.
  virtual bool poll() = 0;

 protected:
  virtual void deliver(int sig) = 0;
};

class StartedProcess : public Process {
 public:
  explicit StartedProcess(std::unique_ptr<harness::ChildProcess> child);
  ~StartedProcess() override;
  void watch(std::vector<pollfd>& fds) const override;
  bool poll() override;
  // Waits up to `limit` for it to end.
  void waitEnd(std::chrono::milliseconds limit) { child_->wait(limit); }

 private:
  void deliver(int sig) override { child_->signal(sig); }
  std::unique_ptr<harness::ChildProcess> child_;
  int ends_ = -1;  // a pidfd: readable once it has ended
};

class SupervisedProcess : public Process {
 public:
  explicit SupervisedProcess(std::filesystem::path prefix) : prefix_(std::move(prefix)) {}
  void watch(std::vector<pollfd>&) const override {}
  bool poll() override;
  // Slurm ended its step before the supervisor could say how the agent
  // ended (srun kills a step's tasks once one was killed): killed from
  // outside.
  void killedBySlurm();
  pid_t pid();  // 0: not started yet

 private:
  void deliver(int sig) override;
  std::filesystem::path prefix_;
  pid_t pid_ = 0;
  std::size_t outRead_ = 0;
  std::size_t errRead_ = 0;
};

// A descriptor that becomes readable when process `pid` ends (-1: it has
// ended already, or the kernel has no pidfd_open).
int pidDescriptor(pid_t pid);

// Waits until every one of `pids` has ended or `limit` passed; the ones
// still running.
std::vector<pid_t> stillRunningAfter(const std::set<pid_t>& pids, std::chrono::milliseconds limit);

// `ddprun-chaos --supervise PREFIX -- argv...`; its exit code.
int supervise(const std::filesystem::path& prefix, const std::vector<std::string>& argv);

}  // namespace ddprun::chaos
