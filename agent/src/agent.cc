#include "ddprun/agent/agent.h"

#include <sched.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "attempt_store.h"
#include "ddprun/common/env.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/rendezvous/store_server.h"
#include "event_log.h"
#include "failure_report.h"
#include "file_timer_server.h"
#include "free_port.h"
#include "hang_watchdog.h"
#include "launcher_error_file.h"
#include "network_interface.h"
#include "node_rendezvous.h"
#include "numa_binding.h"
#include "orphan_guard.h"
#include "output_router.h"
#include "python_zygote.h"
#include "restart_backoff.h"
#include "run_directory.h"
#include "uninterruptible_watch.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace protocol = rendezvous::protocol;

struct Agent::Impl {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        signals(io),
        runDir(config.logDir, config.runId, config.keepLogs),
        baseEnv(environmentMap()),
        events(config.eventLog) {
    for (int sig : config.forwardedSignals) signals.add(sig);
    if (!runDir.temporary()) {
      std::cerr << "ddprun: this launch's logs are in " << runDir.root().string() << "\n";
    }
    if (!config.numaBinding.empty()) planNuma();
    startFileTimer();
    if (!config.preload.empty()) startZygote();
    if (!guard.notice().empty()) DDPRUN_INFO("Notice: {}.", guard.notice());
    // Without a cgroup (now, or once the first worker could not join it)
    // the agent is the workers' subreaper and reaps what it adopts.
    childSignals.add(SIGCHLD);
    reapAdopted();
    if (router.consoleIsTerminal() || config.tty == WorkerTty::kAlways) {
      windowSignals.add(SIGWINCH);
      followWindowSize();
    }
  }

  // SIGWINCH: the workers' terminals follow ddprun's.
  void followWindowSize() {
    windowSignals.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      if (group && !group->finished()) {
        group->resizeTerminals();
      } else {
        router.refreshTerminalSize();
      }
      followWindowSize();
    });
  }

  void reapAdopted();

  // TORCHELASTIC_ENABLE_FILE_TIMER=1: serve PyTorch's FileTimerClient.
  void startFileTimer();
  void onTimerExpired(const ExpiredTimer& timer);
  void onHang(const HangReport& report);

  void planNuma();
  // --preload: the zygote starts importing now, while the rendezvous runs.
  void startZygote();
  // Prints the final report, writes the launcher's error file and exits.
  void failJob(const std::string& report, const WorkerFailure* rootCause, int code);

  bool multiNode() const { return config.rendezvous.mode != RendezvousMode::kStandalone; }
  bool etcdBackend() const { return config.rendezvous.backend == RendezvousBackendKind::kEtcd; }

  // One node: a private store, restarts counted here.
  void startLocalStore();
  // Several nodes: rounds from the job's store.
  void startRendezvous();
  void join();
  void onJoined(const JoinResult& result);
  void onEvent(const protocol::Event& event);
  void onStoreLost(const std::string& reason);
  void findSocketInterface();
  // A round ended (or the store was lost) while its group waited for the
  // zygote: end the round as its group would have.
  void stopWaitingForZygote();

  void startAttempt();
  // Drops what belongs to the current attempt: its watchdog, its file
  // timers and its (finished) worker group.
  void endAttempt();
  // Stops the group with `sig`, and what watches it for hangs and timers.
  void stopGroup(int sig);
  // Ends the hang watchdog and drops the file timers of this attempt.
  void stopWatching();
  void onGroupDone(GroupOutcome outcome);
  // Python workers of a job of several that all succeeded without one of
  // them connecting to the workers' store formed no process group: each
  // trained alone (Lightning on CPU with devices="auto"). Says so.
  void noteWorkersThatTrainedAlone() const;
  void onFailure(const GroupOutcome& outcome);
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT passed for `worker`.
  void onUninterruptible(const WatchedWorker& worker, std::chrono::milliseconds inD);
  // Runs `restart` now, or after the back-off when failures came in a row.
  // --event_log_handler: the job restarts (restart N of the budget) after a
  // failure with `failedCode`.
  // restarts -1: the round ended elsewhere (`reason`), this node rejoins.
  void recordRestart(std::int64_t restarts, int failedCode, const std::string& reason = "");
  void restartAfterBackoff(std::function<void()> restart);
  void waitForSignal();
  WorkerIdentity identityFor(int localRank, const std::string& errorFile) const;
  std::string reportFor(const GroupOutcome& outcome) const;
  void finish(int code);

  const AgentConfig config;
  // Forked first, before any thread exists (see OrphanGuard).
  OrphanGuard guard;
  asio::io_context io{1};
  asio::signal_set signals;
  asio::signal_set childSignals{io};
  RunDirectory runDir;
  OutputRouter router{io, config.tty};
  asio::signal_set windowSignals{io};
  std::map<std::string, std::string> baseEnv;
  EventLog events;
  std::vector<CpuPlacement> placements;  // --numa_binding, per local rank

  // The store the current attempt's workers use, new for each attempt. One
  // node: the private store (native and TCPStore clients). Several nodes,
  // with the agent store: the workers' TCPStore, served by group rank 0.
  std::unique_ptr<AttemptStore> attemptStore;
  std::string token;
  // What every worker gets as DDPRUN_TOKEN: a credential for this job's keys
  // (made once from the store's token).
  std::string workerToken;
  // What ended this node when no worker's failure did (a signal, a failed
  // rendezvous, a lost store), for the launcher's error file.
  std::string endReason;
  bool launcherErrorWritten = false;
  // The interface of this node's rendezvous address, for the workers'
  // sockets (network_interface.h); found at the first join.
  std::optional<std::string> socketInterface;
  std::uint16_t masterPort = 0;
  // Multi-node: this node's rendezvous and its current assignment.
  std::unique_ptr<NodeRendezvous> rendezvous;
  protocol::Assignment assignment;

  std::unique_ptr<WorkerGroup> group;
  int attempt = 0;  // failure restarts so far (TORCHELASTIC_RESTART_COUNT)
  // Once ddprun must stop (a signal, or the store is lost): its exit code.
  std::optional<int> stopCode;
  std::optional<protocol::Event> stoppedFor;  // a pushed event ended the round
  std::optional<protocol::Event> earlyEvent;  // arrived before its round's join answer
  FailureHistory history;
  int lastFailureCode = 0;
  // Several nodes: rounds in a row in which this node's workers failed.
  int failedRoundsInARow = 0;
  RestartBackoff backoff{config.restartBackoff};
  asio::steady_timer backoffTimer{io};
  std::chrono::steady_clock::time_point attemptStarted;
  std::unique_ptr<FileTimerServer> fileTimer;
  std::unique_ptr<HangWatchdog> watchdog;  // --watchdog_timeout, per attempt
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT, per attempt; once it fired
  // the node is unhealthy and its workers are not restarted.
  std::unique_ptr<UninterruptibleWatch> uninterruptibleWatch;
  bool unhealthy = false;
  std::unique_ptr<PythonZygote> zygote;  // --preload
  bool waitingForZygote = false;         // a round's group waits for its import
  int exitCode = 0;
};

// --- one node ---------------------------------------------------------------

void Agent::Impl::startLocalStore() {
  token = randomToken();
  workerToken = workerCredential(token, config.runId);
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  // The OS picks the port (no bind-then-close race), unless the workers'
  // MASTER_PORT was given and they use this store.
  options.port = config.useAgentStore && config.masterPort > 0
                     ? static_cast<std::uint16_t>(config.masterPort)
                     : 0;
  options.token = token;
  options.name = "ddprun-agent-store";
  options.quiet = true;
  options.strict = config.strictStore;
  // Only this node's processes reach 127.0.0.1: PyTorch 1.13's silent
  // callback sockets from there may stay open.
  options.trustedAddresses = {"127.0.0.1"};
  attemptStore = std::make_unique<AttemptStore>(options);
  attemptStore->fresh();  // binds now: a taken --master_port fails before any worker starts
  if (config.useAgentStore) {
    // Workers' init_process_group uses the agent's store: no second port.
    assignment.masterAddr = "127.0.0.1";
  } else {
    masterPort =
        config.masterPort > 0 ? static_cast<std::uint16_t>(config.masterPort) : findFreePort();
    assignment.masterAddr = config.masterAddr;
    assignment.masterPort = masterPort;
  }
  assignment.worldSize = static_cast<std::uint32_t>(config.nprocPerNode);
}

// --- several nodes ----------------------------------------------------------

void Agent::Impl::startRendezvous() {
  rendezvous = std::make_unique<NodeRendezvous>(io, config);
  // Never the agents' token for workers: a credential for this job's keys.
  workerToken = workerCredential(config.rendezvous.token, config.runId);
  if (config.useAgentStore || etcdBackend()) {
    // Served by whichever node becomes group rank 0, on every address (the
    // others reach it at the address the rendezvous knows that node by).
    // With etcd this is the only store the workers have.
    rendezvous::StoreServerOptions options;
    options.host = anyAddressOfTheJobsFamily(config.rendezvous);
    // Only PyTorch's TCPStore clients (which cannot send a token) use it,
    // so it is open like torchrun's own store; the limits still hold.
    options.name = "ddprun-worker-store";
    options.quiet = true;
    attemptStore = std::make_unique<AttemptStore>(options);
  }
  rendezvous->start([this](const protocol::Event& e) { onEvent(e); },
                    [this](const std::string& reason) { onStoreLost(reason); });
  join();
}

void Agent::Impl::join() {
  DDPRUN_INFO("Node {} is joining rendezvous '{}' ({} to {} nodes).", rendezvous->nodeId(),
              config.runId, config.rendezvous.minNodes, config.rendezvous.maxNodes);
  // This node's offer of a store for the round's workers, used if it
  // becomes group rank 0.
  if (attemptStore) rendezvous->setMasterPort(attemptStore->fresh());
  rendezvous->asyncJoin([this](const JoinResult& result) { onJoined(result); });
}

void Agent::Impl::onJoined(const JoinResult& result) {
  if (stopCode) {
    finish(*stopCode);
    return;
  }
  if (result.closed) {
    failJob(result.report, nullptr, result.exitCode);
    return;
  }
  if (result.excluded) {
    // This host failed in too many rounds in a row: the others go on
    // without it. It exits with its last failure's code.
    std::cerr << "ddprun: this node is left out of the job: " << result.error
              << "; the other nodes continue without it\n";
    endReason = "this node is left out of the job: " + result.error;
    const int code = lastFailureCode != 0 ? lastFailureCode : 1;
    if (rendezvous->hosting()) {
      DDPRUN_INFO("This node hosts the job's store: keeping it up until every node left.");
      rendezvous->asyncWaitUntilAllLeft([this, code] { finish(code); });
    } else {
      finish(code);
    }
    return;
  }
  if (!result.assignment) {
    std::cerr << "ddprun: error: the rendezvous failed: " << result.error << "\n";
    endReason = "the rendezvous failed: " + result.error;
    finish(1);
    return;
  }
  assignment = *result.assignment;
  attempt = static_cast<int>(assignment.restarts);
  if (!socketInterface) findSocketInterface();
  if (attemptStore && assignment.groupRank == 0) attemptStore->markUsed();
  if (events.enabled()) {
    events.record("torchelastic.agent.RENDEZVOUS", "AGENT",
                  {{"run_id", config.runId},
                   {"hostname", config.hostname},
                   {"round", std::to_string(assignment.round)},
                   {"group_rank", std::to_string(assignment.groupRank)},
                   {"group_world_size", std::to_string(assignment.groupWorldSize)},
                   {"world_size", std::to_string(assignment.worldSize)}});
  }
  DDPRUN_INFO("Round {}: this node is group rank {} of {}; workers are ranks {} to {} of {}.",
              assignment.round, assignment.groupRank, assignment.groupWorldSize,
              assignment.rankOffset, assignment.rankOffset + config.nprocPerNode - 1,
              assignment.worldSize);
  stoppedFor.reset();
  startAttempt();
  if (earlyEvent && earlyEvent->round == assignment.round) onEvent(*earlyEvent);
  earlyEvent.reset();
}

void Agent::Impl::findSocketInterface() {
  const std::string address = rendezvous->address();
  socketInterface = interfaceWithAddress(address).value_or("");
  if (socketInterface->empty()) return;
  std::vector<std::string> chosen;  // the variables the user left to ddprun
  for (const char* name : {env::kGlooSocketIfname, env::kNcclSocketIfname}) {
    if (std::getenv(name) == nullptr) chosen.emplace_back(name);
  }
  if (!chosen.empty()) {
    DDPRUN_INFO(
        "Workers' sockets use {} ({}), the interface of {}, this node's address in the "
        "rendezvous; set the variable to choose another.",
        *socketInterface, fmt::join(chosen, ", "), address);
  }
}

void Agent::Impl::onEvent(const protocol::Event& event) {
  if (event.type == protocol::EventType::kNodeExcluded ||
      event.type == protocol::EventType::kNodeReadmitted) {
    DDPRUN_WARN("Rendezvous: {}.", event.message);  // news, not a change of this round
    return;
  }
  if (event.round > assignment.round) {
    // The join's answer and the event travel through different threads:
    // keep an event for a round this node has not started yet.
    earlyEvent = event;
    return;
  }
  if (event.round != assignment.round || stoppedFor) return;  // stale, or already stopping
  stoppedFor = event;
  if (event.type == protocol::EventType::kRoundEnded) {
    DDPRUN_WARN("Round {} ended ({}); stopping the workers to join again.", event.round,
                event.message);
  }
  if (group) {
    stopGroup(SIGTERM);
  } else if (waitingForZygote) {
    stopWaitingForZygote();
  } else if (event.type == protocol::EventType::kJobFailed) {
    failJob(event.message, nullptr, static_cast<int>(event.exitCode));
  }
}

void Agent::Impl::stopWaitingForZygote() {
  // As if this round's group had ended without a failure: leave, rejoin or
  // fail as the stop code or the event says.
  waitingForZygote = false;
  onGroupDone(GroupOutcome{});
}

void Agent::Impl::onStoreLost(const std::string& reason) {
  if (stopCode || !rendezvous) return;
  std::cerr << "ddprun: error: lost " << rendezvous->where() << " (" << reason
            << "); stopping this node's workers\n";
  stopCode = 1;
  endReason = fmt::format("lost {} ({})", rendezvous->where(), reason);
  if (group) {
    stopGroup(SIGTERM);
  } else if (waitingForZygote) {
    stopWaitingForZygote();
  }  // a join in progress fails on its own
}

// --- attempts ---------------------------------------------------------------

WorkerIdentity Agent::Impl::identityFor(int localRank, const std::string& errorFile) const {
  WorkerIdentity id;
  id.localRank = localRank;
  id.rank = static_cast<int>(assignment.rankOffset) + localRank;
  id.worldSize = static_cast<int>(assignment.worldSize);
  id.groupRank = static_cast<int>(assignment.groupRank);
  id.groupWorldSize = static_cast<int>(assignment.groupWorldSize);
  id.restartCount = attempt;
  id.masterAddr = assignment.masterAddr;
  id.masterPort = static_cast<int>(assignment.masterPort);
  id.useAgentStore = config.useAgentStore;
  if (multiNode() && etcdBackend()) {
    // No ddprun store holds the rounds: the workers' store is group rank
    // 0's (MASTER_ADDR:MASTER_PORT), per round.
    id.storeHost = assignment.masterAddr;
    id.storePort = static_cast<int>(assignment.masterPort);
    id.token = workerToken;
    id.storePrefix = fmt::format("{}/round_{}/", config.runId, assignment.round);
  } else if (multiNode()) {
    id.storeHost = config.rendezvous.endpointHost;
    id.storePort = config.rendezvous.endpointPort;
    id.token = workerToken;
    id.storePrefix = fmt::format("{}/round_{}/", config.runId, assignment.round);
  } else {
    id.storeHost = "127.0.0.1";
    id.storePort = attemptStore->port();
    id.token = workerToken;
    id.storePrefix = fmt::format("{}/attempt_{}/", config.runId, attempt);
  }
  id.errorFile = errorFile;
  id.socketInterface = socketInterface.value_or("");
  return id;
}

void Agent::Impl::stopWatching() {
  watchdog.reset();
  if (fileTimer) fileTimer->clear();
}

void Agent::Impl::stopGroup(int sig) {
  // The hang watchdog and the file timers would only kill a worker that is
  // being stopped already (during --shutdown_timeout), and blame it.
  stopWatching();
  group->stop(sig);
}

void Agent::Impl::endAttempt() {
  stopWatching();
  uninterruptibleWatch.reset();
  group.reset();
}

void Agent::Impl::startAttempt() {
  endAttempt();
  if (zygote && zygote->starting()) {
    // The first group (or one after the zygote died) waits for its import;
    // what ends the round meanwhile is handled by stopWaitingForZygote().
    waitingForZygote = true;
    zygote->whenReady([this] {
      if (!waitingForZygote) return;
      waitingForZygote = false;
      startAttempt();
    });
    return;
  }
  attemptStarted = std::chrono::steady_clock::now();
  if (!multiNode()) {
    // Every attempt's workers start on an empty store (the previous
    // attempt's workers have all exited by now).
    const std::uint16_t port = attemptStore->fresh();
    attemptStore->markUsed();
    if (config.useAgentStore) assignment.masterPort = port;
  }
  const int directory = multiNode() ? static_cast<int>(assignment.round) - 1 : attempt;
  const WorkerGroup::Shared shared{
      config, baseEnv, guard,      router,
      runDir, events,  placements, zygote ? &zygote->forker() : nullptr};
  group = std::make_unique<WorkerGroup>(
      io, shared, directory,
      [this](int localRank, const std::string& errorFile) {
        return identityFor(localRank, errorFile);
      },
      [this](GroupOutcome outcome) { onGroupDone(std::move(outcome)); });
  group->start();
  if (config.watchdogTimeout.count() > 0) {
    watchdog = std::make_unique<HangWatchdog>(
        io, config.watchdogTimeout,
        [this] { return group ? group->watchedWorkers() : std::vector<WatchedWorker>{}; },
        [this](const HangReport& report) { onHang(report); });
  }
  if (config.uninterruptibleStateTimeout.count() > 0) {
    uninterruptibleWatch = std::make_unique<UninterruptibleWatch>(
        io, config.uninterruptibleStateTimeout,
        [this] { return group ? group->watchedWorkers() : std::vector<WatchedWorker>{}; },
        [this](const WatchedWorker& worker) {
          DDPRUN_WARN(
              "Worker rank {} (pid {}) entered uninterruptible sleep (D state); the node is "
              "unhealthy if it stays there {:g} s (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT).",
              static_cast<int>(assignment.rankOffset) + worker.localRank, worker.pid,
              config.uninterruptibleStateTimeout.count() / 1000.0);
        },
        [this](const WatchedWorker& worker, std::chrono::milliseconds inD) {
          onUninterruptible(worker, inD);
        });
  }
}

std::string Agent::Impl::reportFor(const GroupOutcome& outcome) const {
  FailureSummary summary;
  summary.programName = config.programName;
  summary.attempts = attempt + 1;
  summary.maxRestarts = config.maxRestarts;
  summary.rootCause = *outcome.rootCause;
  summary.otherFailures = outcome.otherFailures;
  summary.stoppedRanks = outcome.stoppedRanks;
  summary.history = history;
  if (multiNode() && failedRoundsInARow >= 2) {
    // In a static job this host cannot be left out: name it.
    summary.repeatedFailure = fmt::format(
        "workers on this node ({}, {}) failed in {} rounds in a row; if they failed first (see "
        "the root cause), check this host",
        config.hostname,
        config.rendezvous.localAddr.empty() ? assignment.masterAddr : config.rendezvous.localAddr,
        failedRoundsInARow);
  }
  summary.filesKept = !runDir.temporary();
  return formatFailureReport(summary);
}

void Agent::Impl::noteWorkersThatTrainedAlone() const {
  if (!config.pythonProgram || !config.useAgentStore || assignment.worldSize < 2) return;
  if (!attemptStore || assignment.groupRank != 0 || attemptStore->connectionsAccepted() > 0) return;
  DDPRUN_WARN(
      "The {} workers finished without any of them connecting to the store at MASTER_ADDR:"
      "MASTER_PORT, so they formed no process group: each ran alone, as a world of one. If they "
      "were meant to train together: PyTorch Lightning does this on CPU with devices=\"auto\" "
      "(one device per process, silently): give Trainer(devices={}, num_nodes={}) "
      "(docs/frameworks.md).",
      assignment.worldSize, config.nprocPerNode, assignment.groupWorldSize);
}

void Agent::Impl::onGroupDone(GroupOutcome outcome) {
  if (stopCode) {
    if (*stopCode > 128) {
      DDPRUN_WARN("ddprun stopped {} workers after receiving {}.", config.nprocPerNode,
                  signalName(*stopCode - 128));
    }
    if (rendezvous) rendezvous->leave(assignment.round);
    finish(*stopCode);
    return;
  }
  if (!outcome.rootCause) failedRoundsInARow = 0;  // this node's workers did not fail
  // Success first (as torchelastic checks SUCCEEDED first): workers that all
  // finished are done, even if the round ended elsewhere while their last
  // output drained.
  if (!outcome.succeeded && stoppedFor && !outcome.rootCause) {
    if (stoppedFor->type == protocol::EventType::kJobFailed) {
      rendezvous->leave(assignment.round);
      failJob(stoppedFor->message, nullptr, static_cast<int>(stoppedFor->exitCode));
    } else {
      recordRestart(-1, 0, stoppedFor->message);
      join();
    }
    return;
  }
  if (outcome.succeeded) {
    noteWorkersThatTrainedAlone();
    if (!rendezvous) {
      finish(0);
      return;
    }
    rendezvous->leave(assignment.round);
    if (rendezvous->hosting()) {
      DDPRUN_INFO("This node's workers are done; keeping the store up until every node left.");
      rendezvous->asyncWaitUntilAllLeft([this] { finish(0); });
    } else {
      finish(0);
    }
    return;
  }
  onFailure(outcome);
}

void Agent::Impl::onFailure(const GroupOutcome& outcome) {
  const WorkerFailure& root = *outcome.rootCause;
  lastFailureCode = root.status.shellCode();
  ++failedRoundsInARow;
  if (unhealthy) {
    // A worker wedged in the kernel: a new one would meet the same device.
    // Unlike torchrun 2.14 (which exits 0 here), the job fails.
    DDPRUN_WARN("This node is unhealthy (a worker stayed in D state); no restart.");
    if (rendezvous) rendezvous->leave(assignment.round);
    failJob(reportFor(outcome), &root, root.status.shellCode());
    return;
  }
  if (rendezvous) {
    // The budget is the job's, kept by the store: one restart per failed round.
    const std::string report = reportFor(outcome);
    rendezvous::protocol::RestartDecision decision;
    try {
      decision =
          rendezvous->reportFailure(assignment.round, root.status.shellCode(), report, root.time);
    } catch (const Error& e) {
      failJob(report + "ddprun: error: could not reach the rendezvous store: " + e.what() + "\n",
              &root, root.status.shellCode());
      return;
    }
    if (decision.restartAllowed) {
      history.add(attempt, root);
      const auto restarts = decision.restarts;
      restartAfterBackoff([this, restarts, failedCode = root.status.shellCode()] {
        DDPRUN_WARN("Restarting the job (restart {} of {}, counted for the whole job).", restarts,
                    config.maxRestarts);
        recordRestart(restarts, failedCode);
        join();
      });
      return;
    }
    rendezvous->leave(assignment.round);
    failJob(report, &root, root.status.shellCode());
    return;
  }
  if (attempt < config.maxRestarts) {
    history.add(attempt, root);
    restartAfterBackoff([this, failedCode = root.status.shellCode()] {
      ++attempt;
      DDPRUN_WARN("Restarting the worker group (restart {} of {}).", attempt, config.maxRestarts);
      recordRestart(attempt, failedCode);
      startAttempt();
    });
    return;
  }
  failJob(reportFor(outcome), &root, root.status.shellCode());
}

void Agent::Impl::recordRestart(std::int64_t restarts, int failedCode, const std::string& reason) {
  if (!events.enabled()) return;
  events.record("torchelastic.agent.RESTART", "AGENT",
                {{"run_id", config.runId},
                 {"hostname", config.hostname},
                 {"round", std::to_string(assignment.round)},
                 {"restart", restarts >= 0 ? std::to_string(restarts) : std::string()},
                 {"max_restarts", std::to_string(config.maxRestarts)},
                 {"exit_code", restarts >= 0 ? std::to_string(failedCode) : std::string()},
                 {"reason", reason.empty() ? "a worker of this node failed" : reason}});
}

void Agent::Impl::restartAfterBackoff(std::function<void()> restart) {
  using std::chrono::milliseconds;
  const auto ranFor =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - attemptStarted);
  const milliseconds wait = backoff.next(ranFor);
  endAttempt();  // a signal now ends ddprun at once (waitForSignal)
  if (wait == milliseconds(0)) {
    restart();
    return;
  }
  DDPRUN_WARN(
      "The workers failed {} times in a row; restarting in {:.2f} s (back-off doubling up to "
      "--restart_backoff_max={} s).",
      backoff.failuresInARow(), wait.count() / 1000.0, config.restartBackoff.max.count() / 1000.0);
  backoffTimer.expires_after(wait);
  backoffTimer.async_wait([this, restart = std::move(restart)](boost::system::error_code ec) {
    if (ec) return;
    if (stopCode) {
      finish(*stopCode);  // the store was lost while waiting
      return;
    }
    restart();
  });
}

void Agent::Impl::failJob(const std::string& report, const WorkerFailure* rootCause, int code) {
  router.flushConsole();  // the workers' last lines come before the report
  std::cerr << report << std::flush;
  if (config.launcherErrorFile) {
    writeLauncherErrorFile(*config.launcherErrorFile, rootCause, code, report);
    launcherErrorWritten = true;
  }
  finish(code);
}

void Agent::Impl::planNuma() {
  cpu_set_t set;
  std::vector<int> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
    }
  }
  const auto visible = baseEnv.find("CUDA_VISIBLE_DEVICES");
  NumaPlan plan = planNumaBinding(
      config.numaBinding, config.nprocPerNode,
      visible == baseEnv.end() ? std::nullopt : std::optional<std::string>(visible->second),
      allowed);
  if (plan.placements.empty()) {
    std::cerr << "ddprun: notice: " << plan.notice << "\n";
    return;
  }
  for (std::size_t i = 0; i < plan.placements.size(); ++i) {
    DDPRUN_INFO("Local rank {} is bound to CPUs {} and prefers memory of NUMA node {}.", i,
                formatCpuList(plan.placements[i].cpus), plan.placements[i].memoryNode);
  }
  placements = std::move(plan.placements);
}

void Agent::Impl::reapAdopted() {
  childSignals.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    std::set<pid_t> workers;  // reaped through their pidfds
    if (group) {
      for (const auto& w : group->watchedWorkers()) workers.insert(w.pid);
    }
    guard.reapAdopted(workers);
    reapAdopted();
  });
}

void Agent::Impl::startZygote() {
  PythonZygote::Settings settings;
  settings.command = config.command;
  settings.modules = config.preload;
  // What every worker shares: the agent's environment and --preload's
  // fixed settings (OMP_NUM_THREADS...), read by libraries at import.
  auto env = baseEnv;
  for (const auto& [key, value] : config.extraEnv) env[key] = value;
  for (const auto& [key, value] : env) settings.env.push_back(key + "=" + value);
  settings.scriptPath = runDir.root() / "preload_zygote.py";
  zygote = std::make_unique<PythonZygote>(
      io, guard, std::move(settings), [this](const std::string& why) {
        failJob(
            fmt::format("ddprun: error: --preload {}: {}\n", fmt::join(config.preload, ","), why),
            nullptr, 2);
      });
}

void Agent::Impl::startFileTimer() {
  const auto enabled = baseEnv.find("TORCHELASTIC_ENABLE_FILE_TIMER");
  if (enabled == baseEnv.end() || enabled->second != "1") return;
  // As torchrun: the path the user gave, else a new one (here in the run
  // directory); the workers get it as TORCHELASTIC_TIMER_FILE.
  const auto given = baseEnv.find("TORCHELASTIC_TIMER_FILE");
  const std::filesystem::path path = given != baseEnv.end() && !given->second.empty()
                                         ? std::filesystem::path(given->second)
                                         : runDir.root() / "file_timer.pipe";
  fileTimer = std::make_unique<FileTimerServer>(
      io, path, [this](int pid) { return group && group->localRankOf(pid).has_value(); },
      [this](const ExpiredTimer& timer) { onTimerExpired(timer); });
  baseEnv["TORCHELASTIC_TIMER_FILE"] = path.string();
}

void Agent::Impl::onTimerExpired(const ExpiredTimer& timer) {
  const double late = std::chrono::duration<double>(timer.firedAt - timer.deadline).count();
  std::optional<int> localRank;
  if (group) localRank = group->localRankOf(timer.pid);
  const std::string action = timer.signal > 0
                                 ? fmt::format("ddprun sent it {}", signalName(timer.signal))
                                 : std::string("its signal is 0, so it was left running");
  const std::string cause =
      fmt::format("file timer '{}' (pid {}) expired {:.2f} s past its deadline; {}", timer.scope,
                  timer.pid, late, action);
  if (localRank) {
    DDPRUN_WARN("Worker rank {}: {}.", static_cast<int>(assignment.rankOffset) + *localRank, cause);
    group->noteCause(*localRank, cause);
  } else {
    DDPRUN_WARN("A {}.", cause);
  }
}

void Agent::Impl::onHang(const HangReport& report) {
  if (!group) return;
  const int rank = static_cast<int>(assignment.rankOffset) + report.localRank;
  const std::string cause = fmt::format(
      "hung: no worker of this node made progress (CPU or I/O) for {:.1f} s "
      "(--watchdog_timeout={:g}); this one stopped first ({:.1f} s ago{}); ddprun sent it "
      "SIGKILL",
      report.quietSeconds, config.watchdogTimeout.count() / 1000.0, report.stalledSeconds,
      report.aheadSeconds > 0    ? fmt::format(", {:.1f} s before the next", report.aheadSeconds)
      : report.aheadSeconds == 0 ? std::string(", with others in the same sample")
                                 : std::string());
  DDPRUN_WARN("Worker rank {} (pid {}) is {}.", rank, report.pid, cause);
  for (const auto& line : report.details) DDPRUN_WARN("  worker rank {}: {}", rank, line);
  for (const auto& peer : report.peers) {
    DDPRUN_WARN("  other worker rank {}: last progress {:.1f} s ago{}{}",
                static_cast<int>(assignment.rankOffset) + peer.localRank, peer.stalledSeconds,
                peer.where.empty() ? "" : "; ", peer.where);
  }
  group->noteCause(report.localRank, cause, report.details);
  ::kill(report.pid, SIGKILL);
}

void Agent::Impl::onUninterruptible(const WatchedWorker& worker, std::chrono::milliseconds inD) {
  if (!group) return;
  unhealthy = true;
  const int rank = static_cast<int>(assignment.rankOffset) + worker.localRank;
  const std::string where = describeWait(worker.pid);
  const std::string cause = fmt::format(
      "stuck in uninterruptible sleep (D state) for {:.1f} s "
      "(TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT={:g}){}; the node is unhealthy, so ddprun "
      "sent it SIGKILL and does not restart the workers",
      inD.count() / 1000.0, config.uninterruptibleStateTimeout.count() / 1000.0,
      where.empty() ? "" : "; " + where);
  DDPRUN_WARN("Worker rank {} (pid {}) is {}.", rank, worker.pid, cause);
  group->noteCause(worker.localRank, cause);
  ::kill(worker.pid, SIGKILL);
}

void Agent::Impl::waitForSignal() {
  signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    router.endOpenLine();  // a progress bar's row is not ddprun's
    if (!stopCode) {
      stopCode = 128 + sig;
      endReason = fmt::format("ddprun (pid {}) received {} and stopped its workers", ::getpid(),
                              signalName(sig));
      DDPRUN_WARN("ddprun received {}; forwarding it to the workers (SIGKILL after {} ms).",
                  signalName(sig), config.shutdownTimeout.count());
    } else {
      DDPRUN_WARN("ddprun received {} again; killing the workers now.", signalName(sig));
    }
    if (group && !group->finished()) {
      stopGroup(sig);
    } else if (waitingForZygote) {
      stopWaitingForZygote();  // leaves the round this node joined
    } else {
      finish(*stopCode);  // between rounds (or joining again): nothing to stop
    }
    waitForSignal();
  });
}

void Agent::Impl::finish(int code) {
  exitCode = code;
  if (code != 0 && config.launcherErrorFile && !launcherErrorWritten) {
    // Every failing exit names its cause there, not only a worker's failure
    // (torchrun's @record writes its exception: a signal, a rendezvous timeout).
    const std::string what =
        endReason.empty() ? fmt::format("ddprun exited with code {}", code) : endReason;
    writeLauncherErrorFile(*config.launcherErrorFile, nullptr, code, what, what);
    launcherErrorWritten = true;
  }
  if (events.enabled()) {
    events.record(
        code == 0 ? "torchelastic.agent.status.SUCCEEDED" : "torchelastic.agent.status.FAILED",
        "AGENT",
        {{"run_id", config.runId},
         {"hostname", config.hostname},
         {"exit_code", std::to_string(code)},
         {"agent_restarts", std::to_string(attempt)}});
  }
  endAttempt();
  signals.cancel();
  childSignals.cancel();
  windowSignals.cancel();
  io.stop();
}

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Agent::~Agent() = default;

int Agent::run() {
  impl_->waitForSignal();
  if (impl_->multiNode()) {
    impl_->startRendezvous();
  } else {
    impl_->startLocalStore();
    impl_->startAttempt();
  }
  impl_->io.run();
  // Stop the rendezvous threads before anything they post to is destroyed.
  impl_->rendezvous.reset();
  return impl_->exitCode;
}

}  // namespace ddprun::agent
