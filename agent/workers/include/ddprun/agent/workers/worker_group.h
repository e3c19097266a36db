// WorkerGroup: the workers of one attempt on this node.
//
// It spawns them, pumps their output, and watches their exits. The first
// worker to fail is the root cause: the group then stops the others
// (signal, grace period, SIGKILL) and reports once every worker has been
// reaped, stragglers in their process groups killed, and their output
// drained. The caller decides what happens next (restart, report, exit).
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns its WorkerProcess objects; borrows everything else.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "ddprun/agent/core/outcome.h"
#include "ddprun/agent/core/worker_event.h"
#include "ddprun/agent/output/log_pump.h"
#include "ddprun/agent/output/output_router.h"
#include "ddprun/agent/workers/orphan_guard.h"
#include "ddprun/agent/workers/run_directory.h"
#include "ddprun/agent/workers/worker_env.h"
#include "ddprun/agent/workers/worker_process.h"
#include "ddprun/agent/workers/workers_settings.h"

namespace ddprun::agent {

class WorkerGroup {
 public:
  using IdentityFn = std::function<WorkerIdentity(int localRank, const std::string& errorFile)>;
  using DoneFn = std::function<void(GroupOutcome)>;

  // What a group borrows from its agent for its whole life.
  struct Shared {
    const WorkersSettings& config;
    const std::map<std::string, std::string>& baseEnv;  // every worker inherits it
    OrphanGuard& guard;
    OutputRouter& router;
    const RunDirectory& runDir;
    WorkerEventFn onEvent;                        // each worker's start and end; may be empty
    const std::vector<CpuPlacement>& placements;  // per local rank, or empty
    const Forker* forker = nullptr;               // --preload's zygote, or exec
  };

  // `runIndex` names the attempt's folder (attempt_<runIndex>);
  // `restartCount` is its TORCHELASTIC_RESTART_COUNT (in its events and
  // failures); `env`: what its workers inherit (the node's environment and
  // the attempt's contributions).
  WorkerGroup(boost::asio::io_context& io, const Shared& shared, int runIndex, int restartCount,
              std::map<std::string, std::string> env, IdentityFn identity, DoneFn onDone);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Spawns every worker. A worker that cannot be started (missing program,
  // no descriptors left, a log file that cannot be created) counts as the
  // first failure (exit code 127) and stops the others.
  void start();
  // Forwards `sig` to every live worker's process group, then SIGKILLs the
  // survivors after the shutdown timeout. A later call with SIGKILL ends
  // the grace period at once; any other later call changes nothing.
  void stop(int sig, std::chrono::milliseconds grace);
  // A worker's failure: the survivors' stop (WorkersSettings::survivorGrace).
  void stopSurvivors();
  // ddprun's terminal changed size (SIGWINCH): the workers' terminals follow
  // and the workers get SIGWINCH.
  void resizeTerminals();
  // Every worker has exited and the outcome was delivered.
  bool finished() const { return finished_; }
  int liveWorkers() const { return live_; }

  // The local rank of the live worker `pid` is, or descends from (through
  // /proc), or nullopt.
  std::optional<int> localRankOf(int pid) const;
  // Why the worker of `localRank` is about to fail (a watchdog or timer
  // kills it): shown in its failure report.
  void noteCause(int localRank, std::string cause, std::vector<std::string> details = {});
  // The workers not reaped yet (the hang watchdog's subjects; a subreaper
  // must leave them alone).
  std::vector<WatchedWorker> watchedWorkers() const;

 private:
  struct Slot {
    std::unique_ptr<WorkerProcess> process;
    int localRank = 0;
    int rank = 0;
    int groupRank = 0;
    bool exited = true;
    bool stoppedByAgent = false;
    ExitStatus status;
    std::filesystem::path errorFile;
    std::string cause;  // set when ddprun itself is about to kill it
    std::vector<std::string> causeDetails;
  };

  void spawn(Slot& slot);
  void startProcess(Slot& slot);
  void recordEvent(const Slot& slot, const std::string& state, const std::string& rawError = "");
  void onExit(int localRank, ExitStatus status);
  void fail(Slot& slot, ExitStatus status, const std::string& reason);
  WorkerFailure failureOf(const Slot& slot, ExitStatus status) const;
  void maybeFinish();
  void armDrainTimer(std::uint64_t consoleWritten);
  void finish();

  boost::asio::io_context& io_;
  Shared shared_;
  const std::map<std::string, std::string> env_;
  const int runIndex_;
  const int restartCount_;
  IdentityFn identity_;
  DoneFn onDone_;

  std::vector<Slot> slots_;
  std::vector<std::shared_ptr<LogPump>> pumps_;
  int live_ = 0;
  int openPumps_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  bool leftoversKilled_ = false;
  std::string cgroup_;  // the cgroup its workers are born in; empty: none
  GroupOutcome outcome_;
  boost::asio::steady_timer graceTimer_;
  boost::asio::steady_timer drainTimer_;
};

}  // namespace ddprun::agent
