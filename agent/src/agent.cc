#include "ddprun/agent/agent.h"

#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <fmt/format.h>

#include <iostream>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/store_server.h"
#include "failure_report.h"
#include "free_port.h"
#include "orphan_guard.h"
#include "output_router.h"
#include "run_directory.h"
#include "signal_names.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ddprun::agent {

namespace asio = boost::asio;

struct Agent::Impl {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        signals(io, SIGINT, SIGTERM, SIGHUP),
        runDir(config.logDir, config.runId),
        baseEnv(currentEnvironment()) {
    signals.add(SIGQUIT);
    signals.add(SIGUSR1);
    signals.add(SIGUSR2);
  }

  void startStore();
  void startAttempt();
  void onGroupDone(GroupOutcome outcome);
  void waitForSignal();
  WorkerIdentity identityFor(int localRank, const std::string& errorFile) const;
  void finish(int code);

  const AgentConfig config;
  // Forked first, before any thread exists (see OrphanGuard).
  OrphanGuard guard;
  asio::io_context io{1};
  asio::signal_set signals;
  RunDirectory runDir;
  OutputRouter router;
  std::map<std::string, std::string> baseEnv;
  std::unique_ptr<rendezvous::StoreServer> store;
  std::string token;
  std::uint16_t masterPort = 0;

  std::unique_ptr<WorkerGroup> group;
  int attempt = 0;
  std::optional<int> receivedSignal;
  std::vector<std::string> history;
  int exitCode = 0;
};

void Agent::Impl::startStore() {
  token = randomToken();
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;  // the OS picks: no bind-then-close race
  options.token = token;
  options.name = "ddprun-agent-store";
  options.quiet = true;
  store = std::make_unique<rendezvous::StoreServer>(options);
  store->start();
  masterPort =
      config.masterPort > 0 ? static_cast<std::uint16_t>(config.masterPort) : findFreePort();
}

WorkerIdentity Agent::Impl::identityFor(int localRank, const std::string& errorFile) const {
  WorkerIdentity id;
  id.localRank = localRank;
  id.rank = config.nodeRank * config.nprocPerNode + localRank;
  id.worldSize = config.nnodes * config.nprocPerNode;
  id.restartCount = attempt;
  id.masterAddr = config.masterAddr;
  id.masterPort = masterPort;
  id.storeHost = "127.0.0.1";
  id.storePort = store->port();
  id.storePrefix = fmt::format("{}/attempt_{}/", config.runId, attempt);
  id.errorFile = errorFile;
  id.token = token;
  return id;
}

void Agent::Impl::startAttempt() {
  group.reset();
  group = std::make_unique<WorkerGroup>(
      io, config, baseEnv, guard, router, runDir, attempt,
      [this](int localRank, const std::string& errorFile) {
        return identityFor(localRank, errorFile);
      },
      [this](GroupOutcome outcome) { onGroupDone(std::move(outcome)); });
  group->start();
}

void Agent::Impl::onGroupDone(GroupOutcome outcome) {
  if (receivedSignal) {
    DDPRUN_WARN("ddprun stopped {} workers after receiving {}.", config.nprocPerNode,
                signalName(*receivedSignal));
    finish(128 + *receivedSignal);
    return;
  }
  if (outcome.succeeded) {
    finish(0);
    return;
  }
  const WorkerFailure& root = *outcome.rootCause;
  if (attempt < config.maxRestarts) {
    history.push_back(fmt::format("attempt {}: {}", attempt, describeExit(root)));
    ++attempt;
    DDPRUN_WARN("Restarting the worker group (restart {} of {}).", attempt, config.maxRestarts);
    startAttempt();
    return;
  }
  FailureSummary summary;
  summary.programName = config.programName;
  summary.attempts = attempt + 1;
  summary.maxRestarts = config.maxRestarts;
  summary.rootCause = root;
  summary.otherFailures = std::move(outcome.otherFailures);
  summary.stoppedRanks = std::move(outcome.stoppedRanks);
  summary.history = history;
  std::cerr << formatFailureReport(summary) << std::flush;
  finish(root.status.shellCode());
}

void Agent::Impl::waitForSignal() {
  signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (!receivedSignal) {
      receivedSignal = sig;
      DDPRUN_WARN("ddprun received {}; forwarding it to the workers (SIGKILL after {} ms).",
                  signalName(sig), config.shutdownTimeout.count());
    } else {
      DDPRUN_WARN("ddprun received {} again; killing the workers now.", signalName(sig));
    }
    if (group) group->stop(sig);
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
  impl_->startStore();
  impl_->waitForSignal();
  impl_->startAttempt();
  impl_->io.run();
  return impl_->exitCode;
}

}  // namespace ddprun::agent
