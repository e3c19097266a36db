// The composition root: builds the rooms' parts in order and connects them
// (docs/architecture.md, "The agent's rooms"). Features are built and
// registered in features/registry.cc; none lives here.
#include "ddprun/agent/agent.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <iostream>
#include <utility>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/features/registry.h"
#include "ddprun/agent/output/output_router.h"
#include "ddprun/agent/rounds/node_rounds.h"
#include "ddprun/agent/workers/lifecycle_ports.h"
#include "ddprun/agent/workers/numa_binding.h"
#include "ddprun/agent/workers/orphan_guard.h"
#include "ddprun/agent/workers/python_zygote.h"
#include "ddprun/agent/workers/run_directory.h"
#include "ddprun/agent/workers/worker_group_runner.h"
#include "ddprun/common/environment.h"
#include "signal_source.h"

namespace ddprun::agent {

namespace asio = boost::asio;

struct Agent::Impl {
  explicit Impl(AgentConfig c);
  void onAssigned(const rendezvous::protocol::Assignment& assigned);
  void waitForSignal();
  void finish(int code);

  const AgentConfig config;
  const WorkersSettings workers = workersSettingsOf(config);
  OrphanGuard guard;  // forked first, before any thread exists (see OrphanGuard)
  asio::io_context io{1};
  SignalSource signals{io};
  asio::signal_set childSignals{io, SIGCHLD};
  asio::signal_set windowSignals{io};
  RunDirectory runDir{config.output.logDir, config.runId, config.output.keepLogs};
  OutputRouter router{io, config.output.tty};
  const Environment inherited = environmentMap();
  Environment workersEnv;  // what every worker inherits: `inherited` and the features'
  std::vector<CpuPlacement> placements;  // --numa_binding, per local rank
  std::unique_ptr<FeatureSet> features;
  WorkerGroupRunner runner{
      io, WorkerGroup::Shared{workers, workersEnv, guard, router, runDir,
                              [this](const WorkerEvent& e) { features->workerEvent(e); },
                              placements, nullptr}};
  NodeRounds rounds;
  std::unique_ptr<PythonZygote> zygote;  // --preload
  std::unique_ptr<ZygoteGate> gate;
  LoopClock clock{io};
  std::unique_ptr<NodeLifecycle> lifecycle;
  bool assigned = false;
  int exitCode = 0;
};

Agent::Impl::Impl(AgentConfig c) : config(std::move(c)) {
  signals.addStopSignals(config.stopping.forwardedSignals, config.stopping.underSlurm);
  if (!runDir.temporary()) {
    std::cerr << "ddprun: this launch's logs are in " << runDir.root().string() << "\n";
  }
  rounds = makeNodeRounds(io, roundsSettingsOf(config), [this](const auto& a) { onAssigned(a); });
  features = std::make_unique<FeatureSet>(FeatureContext{
      io, config, inherited, runDir.root(), !runDir.temporary(), runner, rounds,
      rounds.rendezvous.get(), guard.notice(), [this] { router.flushConsole(); },
      [this](const Attempt& a) { return flightRecorderDir(runDir.attemptDir(a.runIndex)); }});
  // Every contribution is in before the zygote or any worker copies it.
  workersEnv = inherited;
  features->contributeEnvironment(workersEnv);
  if (!config.numaBinding.empty()) {
    placements = planNumaForThisNode(config.numaBinding, config.nprocPerNode, workersEnv);
  }
  if (config.preloadMode != PreloadMode::kOff) {
    // The zygote starts importing now, while the rendezvous runs.
    zygote = std::make_unique<PythonZygote>(
        io, guard, zygoteSettings(config, workersEnv, runDir.root()),
        [this](const std::string& report) { lifecycle->fail(report, 2); });
    gate = std::make_unique<ZygoteGate>(*zygote);
    runner.useForker(zygote->forker());
  }
  runner.useRounds(*rounds.source);
  runner.useAttemptEnvironment(*features);
  runner.setWorkerToken(rounds.workerToken);
  if (rounds.relayed) rounds.relayed->tellLossesTo(*features);
  LifecycleSettings settings = lifecycleSettingsOf(config);
  settings.describeFailure = [this](const GroupOutcome& outcome, const FailureContext& context) {
    return features->describeFailure(outcome, context);
  };
  settings.exit = [this](int code) { finish(code); };
  lifecycle = std::make_unique<NodeLifecycle>(
      std::move(settings), LifecyclePorts{runner, *rounds.source, clock, gate.get()});
  features->attach(*lifecycle, zygote.get());
  whenSignalled(childSignals, [this] { runner.reapAdopted(); });
  if (router.consoleIsTerminal() || config.output.tty == WorkerTty::kAlways) {
    windowSignals.add(SIGWINCH);
    whenSignalled(windowSignals, [this] { runner.resizeTerminals(); });
  }
}

void Agent::Impl::onAssigned(const rendezvous::protocol::Assignment& round) {
  if (!std::exchange(assigned, true)) {
    runner.setSocketInterface(socketInterfaceFor(rounds.rendezvous->address()));
  }
  features->roundAssigned(round);
}

void Agent::Impl::waitForSignal() {
  signals.asyncWait([this](SignalSource::Received received) {
    router.endOpenLine();  // a progress bar's row is not ddprun's
    actOnSignal(received, config.stopping.forwardedSignals, config.stopping.underSlurm,
                [this](int signal, bool forward) { lifecycle->onSignal(signal, forward); });
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
  if (a.rounds.rendezvous) {
    a.rounds.rendezvous->start(
        [&a](const rendezvous::protocol::Event& e) { a.lifecycle->onRoundEvent(e); },
        [&a](const std::string& what) { a.lifecycle->onStoreLost(what); });
  }
  a.waitForSignal();
  a.lifecycle->start();
  a.io.run();
  // Stop the rendezvous threads before anything they post to is destroyed.
  a.rounds.rendezvous.reset();
  return a.exitCode;
}

}  // namespace ddprun::agent
