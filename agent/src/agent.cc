#include "ddprun/agent/agent.h"

#include <sched.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <random>

#include "attempt_store.h"
#include "ddprun/agent/core/node_lifecycle.h"
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
#include "lifecycle_hooks.h"
#include "local_rounds.h"
#include "network_interface.h"
#include "node_rendezvous.h"
#include "numa_binding.h"
#include "orphan_guard.h"
#include "output_router.h"
#include "python_zygote.h"
#include "rendezvous_rounds.h"
#include "run_directory.h"
#include "signal_source.h"
#include "uninterruptible_watch.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace protocol = rendezvous::protocol;

namespace {

// The lifecycle's clock: the loop's steady clock and one timer.
class LoopClock : public LifecycleClock {
 public:
  explicit LoopClock(asio::io_context& io) : timer_(io) {}
  std::chrono::steady_clock::time_point now() const override {
    return std::chrono::steady_clock::now();
  }
  void after(std::chrono::milliseconds wait, std::function<void()> then) override {
    timer_.expires_after(wait);
    timer_.async_wait([then = std::move(then)](boost::system::error_code ec) {
      if (!ec) then();
    });
  }
  void cancel() override { timer_.cancel(); }

 private:
  asio::steady_timer timer_;
};

// --preload's zygote as the lifecycle's start gate.
class ZygoteGate : public StartGate {
 public:
  explicit ZygoteGate(PythonZygote& zygote) : zygote_(zygote) {}
  bool ready() const override { return !zygote_.starting(); }
  void whenReady(std::function<void()> then) override { zygote_.whenReady(std::move(then)); }

 private:
  PythonZygote& zygote_;
};

}  // namespace

struct Agent::Impl : GroupRunner {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        signals(io),
        runDir(config.logDir, config.runId, config.keepLogs),
        baseEnv(environmentMap()),
        events(config.eventLog) {
    for (int sig : config.forwardedSignals) signals.add(sig);
    if (config.underSlurm) {
      for (int sig : {SIGUSR1, SIGUSR2}) signals.add(sig);
    }
    if (!runDir.temporary()) {
      std::cerr << "ddprun: this launch's logs are in " << runDir.root().string() << "\n";
    }
    if (!config.numaBinding.empty()) planNuma();
    startFileTimer();
    if (!config.preload.empty()) startZygote();
    // One node: its notices now; several: once per job (onAssigned).
    if (!multiNode() && !guard.notice().empty()) DDPRUN_INFO("Notice: {}.", guard.notice());
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
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT passed for `worker`.
  void onUninterruptible(const WatchedWorker& worker, std::chrono::milliseconds inD);

  void planNuma();
  // --preload: the zygote starts importing now, while the rendezvous runs.
  void startZygote();

  bool multiNode() const { return config.rendezvous.mode != RendezvousMode::kStandalone; }
  bool etcdBackend() const { return config.rendezvous.backend == RendezvousBackendKind::kEtcd; }

  // The parts, in order: the round source (one node: a private store, the
  // budget counted here; several: the job's rendezvous), then the
  // lifecycle and the features it carries.
  void startLocalStore();
  void startRendezvous();
  void onAssigned(const protocol::Assignment& assigned);
  void findSocketInterface();
  void buildLifecycle();

  // GroupRunner: one attempt's WorkerGroup.
  void start(const Attempt& next, std::function<void(GroupOutcome)> done) override;
  void stop(int sig) override {
    if (group && !group->finished()) group->stop(sig);
  }

  // Python workers of a job of several that all succeeded without one of
  // them connecting to the workers' store formed no process group: each
  // trained alone (Lightning on CPU with devices="auto"). Says so.
  void noteWorkersThatTrainedAlone() const;
  std::string reportFor(const GroupOutcome& outcome, const FailureContext& context) const;
  WorkerIdentity identityFor(int localRank, const std::string& errorFile) const;
  void waitForSignal();
  void onSignal(const SignalSource::Received& received);
  void finish(int code);

  const AgentConfig config;
  // Forked first, before any thread exists (see OrphanGuard).
  OrphanGuard guard;
  asio::io_context io{1};
  SignalSource signals;
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
  // The interface of this node's rendezvous address, for the workers'
  // sockets (network_interface.h); found at the first join.
  std::optional<std::string> socketInterface;
  // Multi-node: this node's rendezvous.
  std::unique_ptr<NodeRendezvous> rendezvous;
  std::unique_ptr<RoundSource> rounds;
  bool jobNoticesSaid = false;  // the job-wide notices (onAssigned)

  std::unique_ptr<FileTimerServer> fileTimer;
  std::unique_ptr<PythonZygote> zygote;  // --preload
  std::unique_ptr<ZygoteGate> gate;
  LoopClock clock{io};
  std::unique_ptr<NodeLifecycle> lifecycle;
  std::vector<std::unique_ptr<LifecycleHook>> hooks;
  // The running (or last) attempt and its group.
  Attempt attempt;
  std::unique_ptr<WorkerGroup> group;
  int exitCode = 0;

  // Python workers trained alone (noteWorkersThatTrainedAlone) after success.
  struct TrainedAloneNote : LifecycleHook {
    explicit TrainedAloneNote(const Impl& impl) : owner(impl) {}
    void attemptEnded(const Attempt&, const GroupOutcome& outcome) override {
      if (outcome.succeeded) owner.noteWorkersThatTrainedAlone();
    }
    const Impl& owner;
  };
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
  protocol::Assignment base;
  if (config.useAgentStore) {
    // Workers' init_process_group uses the agent's store: no second port.
    base.masterAddr = "127.0.0.1";
  } else {
    base.masterAddr = config.masterAddr;
    base.masterPort =
        config.masterPort > 0 ? static_cast<std::uint16_t>(config.masterPort) : findFreePort();
  }
  base.worldSize = static_cast<std::uint32_t>(config.nprocPerNode);
  rounds = std::make_unique<LocalRounds>(io, *attemptStore, base, config.useAgentStore,
                                         config.maxRestarts, config.runId);
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
  rounds = std::make_unique<RendezvousRounds>(
      *rendezvous, attemptStore.get(), config,
      [this](const protocol::Assignment& assigned) { onAssigned(assigned); });
}

void Agent::Impl::onAssigned(const protocol::Assignment& assigned) {
  if (!socketInterface) findSocketInterface();
  if (!jobNoticesSaid && assigned.groupRank == 0) {
    // What holds for every node is said once per job, by the node that is
    // group rank 0 in the first round.
    if (!config.rendezvous.openStoreNotice.empty()) {
      std::cerr << "ddprun: notice: " << config.rendezvous.openStoreNotice << "\n";
    }
    if (!guard.notice().empty()) {
      DDPRUN_INFO("Notice: {} (on this node; likely on every node).", guard.notice());
    }
  }
  jobNoticesSaid = true;
  if (events.enabled()) {
    events.record("torchelastic.agent.RENDEZVOUS", "AGENT",
                  {{"run_id", config.runId},
                   {"hostname", config.hostname},
                   {"round", std::to_string(assigned.round)},
                   {"group_rank", std::to_string(assigned.groupRank)},
                   {"group_world_size", std::to_string(assigned.groupWorldSize)},
                   {"world_size", std::to_string(assigned.worldSize)}});
  }
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

// --- the lifecycle ----------------------------------------------------------

void Agent::Impl::buildLifecycle() {
  LifecycleSettings settings;
  settings.maxRestarts = config.maxRestarts;
  settings.workersPerNode = config.nprocPerNode;
  settings.shutdownTimeout = config.shutdownTimeout;
  settings.backoff = {config.restartBackoff.initial, config.restartBackoff.max};
  settings.backoffSeed = std::random_device{}();
  settings.describeFailure = [this](const GroupOutcome& outcome, const FailureContext& context) {
    return reportFor(outcome, context);
  };
  settings.exit = [this](int code) { finish(code); };
  if (zygote) gate = std::make_unique<ZygoteGate>(*zygote);
  lifecycle = std::make_unique<NodeLifecycle>(std::move(settings),
                                              LifecyclePorts{*this, *rounds, clock, gate.get()});
  // The features, in the order they see each step: the exit's report comes
  // before the launcher's error file and the event log's status.
  auto workers = [this] { return group ? group->watchedWorkers() : std::vector<WatchedWorker>{}; };
  hooks.push_back(std::make_unique<AttemptWatchers>(
      io, config, fileTimer.get(),
      AttemptWatchers::Callbacks{
          .workers = workers,
          .onHang = [this](const HangReport& report) { onHang(report); },
          .onEnteredD =
              [this](const WatchedWorker& worker) {
                DDPRUN_WARN(
                    "Worker rank {} (pid {}) entered uninterruptible sleep (D state); the node is "
                    "unhealthy if it stays there {:g} s "
                    "(TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT).",
                    static_cast<int>(attempt.assignment.rankOffset) + worker.localRank, worker.pid,
                    config.uninterruptibleStateTimeout.count() / 1000.0);
              },
          .onStuckInD = [this](const WatchedWorker& worker,
                               std::chrono::milliseconds inD) { onUninterruptible(worker, inD); },
      }));
  hooks.push_back(std::make_unique<TrainedAloneNote>(*this));
  hooks.push_back(std::make_unique<FailureReportPrinter>(router));
  if (config.launcherErrorFile) {
    hooks.push_back(std::make_unique<LauncherErrorFileWriter>(*config.launcherErrorFile));
  }
  hooks.push_back(std::make_unique<EventLogHook>(events, config));
  for (auto& hook : hooks) lifecycle->addHook(*hook);
}

void Agent::Impl::start(const Attempt& next, std::function<void(GroupOutcome)> done) {
  attempt = next;
  group.reset();
  const WorkerGroup::Shared shared{
      config, baseEnv, guard,      router,
      runDir, events,  placements, zygote ? &zygote->forker() : nullptr};
  group = std::make_unique<WorkerGroup>(
      io, shared, attempt.runIndex, attempt.restartCount,
      [this](int localRank, const std::string& errorFile) {
        return identityFor(localRank, errorFile);
      },
      std::move(done));
  group->start();
}

WorkerIdentity Agent::Impl::identityFor(int localRank, const std::string& errorFile) const {
  WorkerIdentity id;
  id.localRank = localRank;
  id.rank = static_cast<int>(attempt.assignment.rankOffset) + localRank;
  id.worldSize = static_cast<int>(attempt.assignment.worldSize);
  id.groupRank = static_cast<int>(attempt.assignment.groupRank);
  id.groupWorldSize = static_cast<int>(attempt.assignment.groupWorldSize);
  id.restartCount = attempt.restartCount;
  id.masterAddr = attempt.assignment.masterAddr;
  id.masterPort = static_cast<int>(attempt.assignment.masterPort);
  id.useAgentStore = config.useAgentStore;
  const WorkersStore store = rounds->workersStore(attempt.assignment);
  id.storeHost = store.host;
  id.storePort = store.port;
  id.storePrefix = store.prefix;
  id.token = workerToken;
  id.errorFile = errorFile;
  id.socketInterface = socketInterface.value_or("");
  return id;
}

std::string Agent::Impl::reportFor(const GroupOutcome& outcome,
                                   const FailureContext& context) const {
  FailureSummary summary;
  summary.programName = config.programName;
  summary.attempts = context.attempt.restartCount + 1;
  summary.maxRestarts = config.maxRestarts;
  summary.rootCause = *outcome.rootCause;
  summary.otherFailures = outcome.otherFailures;
  summary.stoppedRanks = outcome.stoppedRanks;
  summary.history = context.history;
  if (multiNode() && context.failedRunsInARow >= 2) {
    // In a static job this host cannot be left out: name it.
    summary.repeatedFailure = fmt::format(
        "workers on this node ({}, {}) failed in {} rounds in a row; if they failed first (see "
        "the root cause), check this host",
        config.hostname,
        config.rendezvous.localAddr.empty() ? context.attempt.assignment.masterAddr
                                            : config.rendezvous.localAddr,
        context.failedRunsInARow);
  }
  summary.filesKept = !runDir.temporary();
  return formatFailureReport(summary);
}

void Agent::Impl::noteWorkersThatTrainedAlone() const {
  if (!config.pythonProgram || !config.useAgentStore || attempt.assignment.worldSize < 2) return;
  if (!attemptStore || attempt.assignment.groupRank != 0 || attemptStore->connectionsAccepted() > 0)
    return;
  DDPRUN_WARN(
      "The {} workers finished without any of them connecting to the store at MASTER_ADDR:"
      "MASTER_PORT, so they formed no process group: each ran alone, as a world of one. If they "
      "were meant to train together: PyTorch Lightning does this on CPU with devices=\"auto\" "
      "(one device per process, silently): give Trainer(devices={}, num_nodes={}) "
      "(docs/frameworks.md).",
      attempt.assignment.worldSize, config.nprocPerNode, attempt.assignment.groupWorldSize);
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
        lifecycle->fail(
            fmt::format("ddprun: error: --preload {}: {}\n", fmt::join(config.preload, ","), why),
            2);
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
    DDPRUN_WARN("Worker rank {}: {}.", static_cast<int>(attempt.assignment.rankOffset) + *localRank,
                cause);
    group->noteCause(*localRank, cause);
  } else {
    DDPRUN_WARN("A {}.", cause);
  }
}

void Agent::Impl::onHang(const HangReport& report) {
  if (!group) return;
  const int rank = static_cast<int>(attempt.assignment.rankOffset) + report.localRank;
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
                static_cast<int>(attempt.assignment.rankOffset) + peer.localRank,
                peer.stalledSeconds, peer.where.empty() ? "" : "; ", peer.where);
  }
  group->noteCause(report.localRank, cause, report.details);
  ::kill(report.pid, SIGKILL);
}

void Agent::Impl::onUninterruptible(const WatchedWorker& worker, std::chrono::milliseconds inD) {
  if (!group) return;
  const int rank = static_cast<int>(attempt.assignment.rankOffset) + worker.localRank;
  const std::string where = describeWait(worker.pid);
  const std::string cause = fmt::format(
      "stuck in uninterruptible sleep (D state) for {:.1f} s "
      "(TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT={:g}){}; the node is unhealthy, so ddprun "
      "sent it SIGKILL and does not restart the workers",
      inD.count() / 1000.0, config.uninterruptibleStateTimeout.count() / 1000.0,
      where.empty() ? "" : "; " + where);
  DDPRUN_WARN("Worker rank {} (pid {}) is {}.", rank, worker.pid, cause);
  lifecycle->markUnhealthy();
  group->noteCause(worker.localRank, cause);
  ::kill(worker.pid, SIGKILL);
}

void Agent::Impl::waitForSignal() {
  signals.asyncWait([this](SignalSource::Received received) {
    router.endOpenLine();  // a progress bar's row is not ddprun's
    onSignal(received);
    waitForSignal();
  });
}

void Agent::Impl::onSignal(const SignalSource::Received& received) {
  const int sig = received.signal;
  const bool forwarded = std::find(config.forwardedSignals.begin(), config.forwardedSignals.end(),
                                   sig) != config.forwardedSignals.end();
  const bool fromSlurm = config.underSlurm && received.sender > 0 &&
                         SignalSource::commandOf(received.sender) == "slurmstepd";
  if (!fromSlurm) {
    if (forwarded) return lifecycle->onSignal(sig);
    // Handled only for Slurm's sake: anyone else's has its default meaning.
    DDPRUN_WARN("ddprun received {} (not in --signals_to_handle) from pid {}; it ends ddprun.",
                signalName(sig), received.sender);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  if (sig == SIGTERM || sig == SIGINT) {
    // scancel, the time limit, preemption: every worker has it already.
    return lifecycle->onSignal(sig, /*forward=*/false);
  }
  DDPRUN_WARN(
      "Slurm sent {} to the job step: every worker received it; ddprun neither forwards it nor "
      "stops them (the early warning of --signal={}@TIME: checkpoint, requeue, train on).",
      signalName(sig), signalName(sig).substr(3));
}

void Agent::Impl::finish(int code) {
  exitCode = code;
  group.reset();
  signals.cancel();
  childSignals.cancel();
  windowSignals.cancel();
  io.stop();
}

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Agent::~Agent() = default;

int Agent::run() {
  if (impl_->multiNode()) {
    impl_->startRendezvous();
  } else {
    impl_->startLocalStore();
  }
  impl_->buildLifecycle();
  if (impl_->rendezvous) {
    impl_->rendezvous->start(
        [this](const protocol::Event& e) { impl_->lifecycle->onRoundEvent(e); },
        [this](const std::string& reason) {
          impl_->lifecycle->onStoreLost(
              fmt::format("lost {} ({})", impl_->rendezvous->where(), reason));
        });
  }
  impl_->waitForSignal();
  impl_->lifecycle->start();
  impl_->io.run();
  // Stop the rendezvous threads before anything they post to is destroyed.
  impl_->rendezvous.reset();
  return impl_->exitCode;
}

}  // namespace ddprun::agent
