// The composition root: builds the rooms' parts in order and wires them
// (docs/architecture.md, "The agent's rooms"). No feature lives here.
#include "ddprun/agent/agent.h"

#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <iostream>
#include <random>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/features/downtime_feature.h"
#include "ddprun/agent/features/event_log_feature.h"
#include "ddprun/agent/features/failure_report_feature.h"
#include "ddprun/agent/features/file_timer_feature.h"
#include "ddprun/agent/features/hang_watchdog_feature.h"
#include "ddprun/agent/features/trained_alone_note.h"
#include "ddprun/agent/features/uninterruptible_feature.h"
#include "ddprun/agent/output/output_router.h"
#include "ddprun/agent/rounds/node_metrics.h"
#include "ddprun/agent/rounds/node_rounds.h"
#include "ddprun/agent/workers/numa_binding.h"
#include "ddprun/agent/workers/orphan_guard.h"
#include "ddprun/agent/workers/python_zygote.h"
#include "ddprun/agent/workers/run_directory.h"
#include "ddprun/agent/workers/worker_group_runner.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/logging.h"
#include "signal_source.h"

namespace ddprun::agent {

namespace asio = boost::asio;

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

}  // namespace

struct Agent::Impl {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        signals(io),
        runDir(config.logDir, config.runId, config.keepLogs),
        baseEnv(environmentMap()),
        events(config, runDir.root()) {
    for (int sig : config.forwardedSignals) signals.add(sig);
    if (config.underSlurm) {
      for (int sig : {SIGUSR1, SIGUSR2}) signals.add(sig);
    }
    if (!runDir.temporary()) {
      std::cerr << "ddprun: this launch's logs are in " << runDir.root().string() << "\n";
    }
    if (!config.numaBinding.empty()) {
      placements = planNumaForThisNode(config.numaBinding, config.nprocPerNode, baseEnv);
    }
    fileTimer = FileTimerFeature::fromEnvironment(io, baseEnv, runDir.root(), runner);
    downtime = std::make_unique<DowntimeFeature>(io, runDir.root(), baseEnv, config.progressHook,
                                                 config.nprocPerNode, runner, events,
                                                 [this] { lifecycle->noteProgress(); });
    if (fileTimer) fileTimer->onRequest([this](int pid) { downtime->fileTimerRequest(pid); });
    if (config.preloadMode != PreloadMode::kOff) startZygote();
    // One node: its notices now; several: once per job (onAssigned).
    if (!multiNode() && !guard.notice().empty()) DDPRUN_INFO("Notice: {}.", guard.notice());
    childSignals.add(SIGCHLD);
    whenSignalled(childSignals, [this] { reapAdopted(); });
    if (router.consoleIsTerminal() || config.tty == WorkerTty::kAlways) {
      windowSignals.add(SIGWINCH);
      whenSignalled(windowSignals, [this] { runner.resizeTerminals(); });
    }
  }

  bool multiNode() const { return config.rendezvous.mode != RendezvousMode::kStandalone; }
  // Calls `then` on the loop each time one of `set`'s signals arrives.
  void whenSignalled(asio::signal_set& set, std::function<void()> then);
  void reapAdopted();
  void startZygote();
  void onAssigned(const rendezvous::protocol::Assignment& assigned);
  void buildLifecycle();
  void waitForSignal();
  void finish(int code);
  void onWorkerEvent(const WorkerEvent& event) {
    events.worker(event);
    downtime->worker(event);
  }

  const AgentConfig config;
  OrphanGuard guard;  // forked first, before any thread exists (see OrphanGuard)
  asio::io_context io{1};
  SignalSource signals;
  asio::signal_set childSignals{io};
  asio::signal_set windowSignals{io};
  RunDirectory runDir;
  OutputRouter router{io, config.tty};
  std::map<std::string, std::string> baseEnv;
  std::vector<CpuPlacement> placements;  // --numa_binding, per local rank
  EventLogFeature events;
  std::unique_ptr<PythonZygote> zygote;  // --preload
  std::unique_ptr<ZygoteGate> gate;
  WorkerGroupRunner runner{
      io,
      WorkerGroup::Shared{config, baseEnv, guard, router, runDir,
                          [this](const WorkerEvent& e) { onWorkerEvent(e); }, placements, nullptr}};
  std::unique_ptr<FileTimerFeature> fileTimer;
  std::unique_ptr<DowntimeFeature> downtime;
  std::unique_ptr<NodeMetrics> metrics;  // one node's --metrics_port
  NodeRounds rounds;
  bool jobNoticesSaid = false;
  LoopClock clock{io};
  std::unique_ptr<NodeLifecycle> lifecycle;
  std::unique_ptr<FailureReportFeature> failureReport;
  std::vector<std::unique_ptr<LifecycleHook>> features;
  int exitCode = 0;
};

void Agent::Impl::whenSignalled(asio::signal_set& set, std::function<void()> then) {
  set.async_wait([this, &set, then = std::move(then)](boost::system::error_code ec, int) {
    if (ec) return;
    then();
    whenSignalled(set, then);
  });
}

// Without a cgroup (now, or once the first worker could not join it) the
// agent is the workers' subreaper and reaps what it adopts.
void Agent::Impl::reapAdopted() {
  std::set<pid_t> workers;  // reaped through their pidfds
  for (const auto& w : runner.watched()) workers.insert(w.pid);
  guard.reapAdopted(workers);
}

// --preload: the zygote starts importing now, while the rendezvous runs.
void Agent::Impl::startZygote() {
  zygote = std::make_unique<PythonZygote>(
      io, guard, zygoteSettings(config, baseEnv, runDir.root()),
      [this](const std::string& report) { lifecycle->fail(report, 2); });
  gate = std::make_unique<ZygoteGate>(*zygote);
  runner.useForker(zygote->forker());
  downtime->onProgramImports([this] { zygote->learnProgramImports(); });
}

void Agent::Impl::onAssigned(const rendezvous::protocol::Assignment& assigned) {
  if (jobNoticesSaid) return events.roundAssigned(assigned);
  runner.setSocketInterface(socketInterfaceFor(rounds.rendezvous->address()));
  if (assigned.groupRank == 0) {
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
  events.roundAssigned(assigned);
}

// The lifecycle, then the features it carries, in the order they see each
// step: the exit's report comes before the launcher's error file and the
// event log's status.
void Agent::Impl::buildLifecycle() {
  failureReport = std::make_unique<FailureReportFeature>(
      config, !runDir.temporary(), [this] { router.flushConsole(); },
      [this](const Attempt& attempt) {
        return flightRecorderDir(runDir.attemptDir(attempt.runIndex));
      });
  LifecycleSettings settings;
  settings.maxRestarts = config.maxRestarts;
  settings.workersPerNode = config.nprocPerNode;
  settings.shutdownTimeout = config.shutdownTimeout;
  settings.survivorGrace = config.survivorGrace;
  settings.backoff = {config.restartBackoff.initial, config.restartBackoff.max};
  settings.backoffSeed = std::random_device{}();
  settings.describeFailure = [this](const GroupOutcome& outcome, const FailureContext& context) {
    return failureReport->describe(outcome, context);
  };
  settings.exit = [this](int code) { finish(code); };
  settings.maxNoProgressRestarts = config.maxNoProgressRestarts;
  settings.noRestartExitCode = config.noRestartExitCode;
  lifecycle = std::make_unique<NodeLifecycle>(
      std::move(settings), LifecyclePorts{runner, *rounds.source, clock, gate.get()});
  if (config.watchdogTimeout.count() > 0) {
    auto watchdog = std::make_unique<HangWatchdogFeature>(io, config.watchdogTimeout, runner);
    watchdog->whenHangFound([this](double stalledSeconds) { downtime->hangFound(stalledSeconds); });
    features.push_back(std::move(watchdog));
  }
  if (config.uninterruptibleStateTimeout.count() > 0) {
    features.push_back(std::make_unique<UninterruptibleFeature>(
        io, config.uninterruptibleStateTimeout, runner, *lifecycle));
  }
  features.push_back(std::make_unique<TrainedAloneNote>(config, rounds));
  for (auto& feature : features) lifecycle->addHook(*feature);
  if (fileTimer) lifecycle->addHook(*fileTimer);
  lifecycle->addHook(*failureReport);
  if (config.launcherErrorFile) {
    features.push_back(std::make_unique<LauncherErrorFileFeature>(*config.launcherErrorFile));
    lifecycle->addHook(*features.back());
  }
  lifecycle->addHook(*downtime);  // its summary before the event log's status
  lifecycle->addHook(events);
}

void Agent::Impl::waitForSignal() {
  signals.asyncWait([this](SignalSource::Received received) {
    router.endOpenLine();  // a progress bar's row is not ddprun's
    const SignalDecision decision =
        decideSignal(received, config.forwardedSignals, config.underSlurm,
                     config.underSlurm ? SignalSource::commandOf(received.sender) : "");
    if (!decision.warning.empty()) DDPRUN_WARN("{}", decision.warning);
    switch (decision.action) {
      case SignalAction::kStop:
        lifecycle->onSignal(received.signal);
        break;
      case SignalAction::kStopWithoutForwarding:
        lifecycle->onSignal(received.signal, /*forward=*/false);
        break;
      case SignalAction::kLeaveWorkersTraining:
        break;
      case SignalAction::kDefault:
        ::signal(received.signal, SIG_DFL);
        ::raise(received.signal);
        break;
    }
    waitForSignal();
  });
}

void Agent::Impl::finish(int code) {
  exitCode = code;
  runner.reset();
  signals.cancel();
  childSignals.cancel();
  windowSignals.cancel();
  io.stop();
}

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Agent::~Agent() = default;

int Agent::run() {
  Impl& a = *impl_;
  if (a.multiNode()) {
    a.rounds = makeRendezvousRounds(
        a.io, a.config,
        [&a](const rendezvous::protocol::Assignment& assigned) { a.onAssigned(assigned); });
  } else {
    a.rounds = makeLocalRounds(a.io, a.config);
  }
  a.runner.useRounds(*a.rounds.source);
  if (a.rounds.relayed) {
    // The relay lost the workers' store: the failure report names it.
    a.rounds.relayed->onRelayLost([&a](const std::string& why) {
      for (const auto& worker : a.runner.watched()) a.runner.noteCause(worker.localRank, why, {});
    });
  }
  a.runner.setWorkerToken(a.rounds.workerToken);
  if (!a.multiNode() && a.config.rendezvous.metricsPort > 0) {
    // No shared store to serve them: this node serves its own.
    a.metrics = std::make_unique<NodeMetrics>(
        a.io, static_cast<std::uint16_t>(a.config.rendezvous.metricsPort), a.config.runId,
        a.config.hostname, [&a] { return a.downtime->countersText(); });
    DDPRUN_INFO("This node's metrics are at http://0.0.0.0:{}/metrics.", a.metrics->port());
  }
  if (a.rounds.rendezvous) {
    // The node's downtime where the job's store (or etcd) keeps it: the
    // store's /metrics and `ddprun status`.
    a.downtime->publishTo([rendezvous = a.rounds.rendezvous.get()](std::string text) {
      rendezvous->publishNodeCounters(rendezvous::protocol::NodeCounters::kDowntime,
                                      std::move(text));
    });
  }
  a.buildLifecycle();
  if (a.rounds.rendezvous) {
    a.rounds.rendezvous->start(
        [&a](const rendezvous::protocol::Event& e) { a.lifecycle->onRoundEvent(e); },
        [&a](const std::string& reason) {
          a.lifecycle->onStoreLost(
              fmt::format("lost {} ({})", a.rounds.rendezvous->where(), reason));
        });
  }
  a.waitForSignal();
  a.lifecycle->start();
  a.io.run();
  // Stop the rendezvous threads before anything they post to is destroyed.
  a.rounds.rendezvous.reset();
  return a.exitCode;
}

}  // namespace ddprun::agent
