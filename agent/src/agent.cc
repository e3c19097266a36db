#include "ddprun/agent/agent.h"

#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <fmt/format.h>

#include <iostream>

#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/rendezvous/store_server.h"
#include "failure_report.h"
#include "free_port.h"
#include "node_rendezvous.h"
#include "orphan_guard.h"
#include "output_router.h"
#include "run_directory.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace protocol = rendezvous::protocol;

struct Agent::Impl {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        signals(io, SIGINT, SIGTERM, SIGHUP),
        runDir(config.logDir, config.runId),
        baseEnv(environmentMap()) {
    signals.add(SIGQUIT);
    signals.add(SIGUSR1);
    signals.add(SIGUSR2);
  }

  bool multiNode() const { return config.rendezvous.mode != RendezvousMode::kStandalone; }

  // One node: a private store, restarts counted here.
  void startLocalStore();
  // Several nodes: rounds from the job's store.
  void startRendezvous();
  void join();
  void onJoined(const JoinResult& result);
  void onEvent(const protocol::Event& event);
  void onStoreLost(const std::string& reason);

  void startAttempt();
  void onGroupDone(GroupOutcome outcome);
  void onFailure(const GroupOutcome& outcome);
  void waitForSignal();
  WorkerIdentity identityFor(int localRank, const std::string& errorFile) const;
  std::string reportFor(const GroupOutcome& outcome) const;
  void finish(int code);

  const AgentConfig config;
  // Forked first, before any thread exists (see OrphanGuard).
  OrphanGuard guard;
  asio::io_context io{1};
  asio::signal_set signals;
  RunDirectory runDir;
  OutputRouter router;
  std::map<std::string, std::string> baseEnv;

  // Standalone: the private store.
  std::unique_ptr<rendezvous::StoreServer> store;
  std::string token;
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
  std::vector<std::string> history;
  int exitCode = 0;
};

// --- one node ---------------------------------------------------------------

void Agent::Impl::startLocalStore() {
  token = randomToken();
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
  store = std::make_unique<rendezvous::StoreServer>(options);
  store->start();
  if (config.useAgentStore) {
    // Workers' init_process_group uses the agent's store: no second port.
    assignment.masterAddr = "127.0.0.1";
    assignment.masterPort = store->port();
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
  rendezvous->start([this](const protocol::Event& e) { onEvent(e); },
                    [this](const std::string& reason) { onStoreLost(reason); });
  join();
}

void Agent::Impl::join() {
  DDPRUN_INFO("Node {} is joining rendezvous '{}' ({} to {} nodes).", rendezvous->nodeId(),
              config.runId, config.rendezvous.minNodes, config.rendezvous.maxNodes);
  rendezvous->asyncJoin([this](const JoinResult& result) { onJoined(result); });
}

void Agent::Impl::onJoined(const JoinResult& result) {
  if (stopCode) {
    finish(*stopCode);
    return;
  }
  if (result.closed) {
    std::cerr << result.report << std::flush;
    finish(result.exitCode);
    return;
  }
  if (!result.assignment) {
    std::cerr << "ddprun: error: the rendezvous failed: " << result.error << "\n";
    finish(1);
    return;
  }
  assignment = *result.assignment;
  attempt = static_cast<int>(assignment.restarts);
  DDPRUN_INFO("Round {}: this node is group rank {} of {}; workers are ranks {} to {} of {}.",
              assignment.round, assignment.groupRank, assignment.groupWorldSize,
              assignment.rankOffset, assignment.rankOffset + config.nprocPerNode - 1,
              assignment.worldSize);
  stoppedFor.reset();
  startAttempt();
  if (earlyEvent && earlyEvent->round == assignment.round) onEvent(*earlyEvent);
  earlyEvent.reset();
}

void Agent::Impl::onEvent(const protocol::Event& event) {
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
    group->stop(SIGTERM);
  } else if (event.type == protocol::EventType::kJobFailed) {
    std::cerr << event.message << std::flush;
    finish(static_cast<int>(event.exitCode));
  }
}

void Agent::Impl::onStoreLost(const std::string& reason) {
  if (stopCode || !rendezvous) return;
  std::cerr << "ddprun: error: lost the rendezvous store at " << config.rendezvous.endpointHost
            << ":" << config.rendezvous.endpointPort << " (" << reason
            << "); stopping this node's workers\n";
  stopCode = 1;
  if (group) group->stop(SIGTERM);  // a join in progress fails on its own
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
  if (multiNode() && config.useAgentStore) {
    // The job's store, which every node reaches.
    id.masterAddr = config.rendezvous.endpointHost;
    id.masterPort = config.rendezvous.endpointPort;
  }
  if (multiNode()) {
    id.storeHost = config.rendezvous.endpointHost;
    id.storePort = config.rendezvous.endpointPort;
    id.token = config.rendezvous.token;
    id.storePrefix = fmt::format("{}/round_{}/", config.runId, assignment.round);
  } else {
    id.storeHost = "127.0.0.1";
    id.storePort = store->port();
    id.token = token;
    id.storePrefix = fmt::format("{}/attempt_{}/", config.runId, attempt);
  }
  id.errorFile = errorFile;
  return id;
}

void Agent::Impl::startAttempt() {
  group.reset();
  const int directory = multiNode() ? static_cast<int>(assignment.round) - 1 : attempt;
  group = std::make_unique<WorkerGroup>(
      io, config, baseEnv, guard, router, runDir, directory,
      [this](int localRank, const std::string& errorFile) {
        return identityFor(localRank, errorFile);
      },
      [this](GroupOutcome outcome) { onGroupDone(std::move(outcome)); });
  group->start();
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
  summary.filesKept = !runDir.temporary();
  return formatFailureReport(summary);
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
  if (stoppedFor && !outcome.rootCause) {
    if (stoppedFor->type == protocol::EventType::kJobFailed) {
      std::cerr << stoppedFor->message << std::flush;
      rendezvous->leave(assignment.round);
      finish(static_cast<int>(stoppedFor->exitCode));
    } else {
      join();
    }
    return;
  }
  if (outcome.succeeded) {
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
  const std::string line = fmt::format("attempt {}: {}", attempt, describeExit(root));
  if (rendezvous) {
    // The budget is the job's, kept by the store: one restart per failed round.
    const std::string report = reportFor(outcome);
    rendezvous::StoreClient::FailureDecision decision;
    try {
      decision = rendezvous->reportFailure(assignment.round, root.status.shellCode(), report);
    } catch (const Error& e) {
      std::cerr << report << "ddprun: error: could not reach the rendezvous store: " << e.what()
                << "\n";
      finish(root.status.shellCode());
      return;
    }
    if (decision.restartAllowed) {
      history.push_back(line);
      DDPRUN_WARN("Restarting the job (restart {} of {}, counted for the whole job).",
                  decision.restarts, config.maxRestarts);
      join();
      return;
    }
    std::cerr << report << std::flush;
    rendezvous->leave(assignment.round);
    finish(root.status.shellCode());
    return;
  }
  if (attempt < config.maxRestarts) {
    history.push_back(line);
    ++attempt;
    DDPRUN_WARN("Restarting the worker group (restart {} of {}).", attempt, config.maxRestarts);
    startAttempt();
    return;
  }
  std::cerr << reportFor(outcome) << std::flush;
  finish(root.status.shellCode());
}

void Agent::Impl::waitForSignal() {
  signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (!stopCode) {
      stopCode = 128 + sig;
      DDPRUN_WARN("ddprun received {}; forwarding it to the workers (SIGKILL after {} ms).",
                  signalName(sig), config.shutdownTimeout.count());
    } else {
      DDPRUN_WARN("ddprun received {} again; killing the workers now.", signalName(sig));
    }
    if (group) {
      group->stop(sig);
    } else {
      finish(*stopCode);  // between rounds: nothing to stop
    }
    waitForSignal();
  });
}

void Agent::Impl::finish(int code) {
  exitCode = code;
  group.reset();
  signals.cancel();
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
