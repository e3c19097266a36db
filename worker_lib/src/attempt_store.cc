#include "attempt_store.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store_client.h"
#include "hosted_daemon.h"

namespace ddprun::worker {

namespace {

// Owns everything the prefixed store needs, in destruction order.
struct AttemptStore {
  std::optional<HostedDaemon> daemon;
  std::optional<rendezvous::StoreClient> client;
  std::optional<rendezvous::PrefixStore> store;
};

std::string attemptPrefix(const Environment& environment) {
  if (!environment.storePrefix.empty()) return environment.storePrefix;
  const char* runId = std::getenv("TORCHELASTIC_RUN_ID");
  if (runId == nullptr) runId = std::getenv("SLURM_JOB_ID");
  return fmt::format("ddprun/{}/attempt_{}/", runId ? runId : "job", environment.restartCount);
}

}  // namespace

std::shared_ptr<rendezvous::Store> connectAttemptStore(const Environment& environment,
                                                       const std::string& groupPrefix,
                                                       std::chrono::milliseconds timeout) {
  if (!environment.distributed || environment.worldSize == 1) return nullptr;
  if (environment.token.empty()) {
    throw ConfigError(
        "DDPRUN_TOKEN is not set, so this rank cannot authenticate to the job's store; launch "
        "with ddprun (which sets it), or export the same secret to every rank (e.g. "
        "export DDPRUN_TOKEN=$(openssl rand -hex 16) in the batch script)");
  }
  auto holder = std::make_shared<AttemptStore>();
  rendezvous::StoreClientOptions options;
  options.token = environment.token;
  options.connectTimeout = timeout;
  options.name = fmt::format("worker rank {}", environment.rank);
  if (!environment.storeHost.empty() && environment.storePort > 0) {
    options.host = environment.storeHost;
    options.port = static_cast<std::uint16_t>(environment.storePort);
  } else {
    // Not launched by ddprun: rank 0 hosts the job's store where torchrun's
    // and SLURM's convention puts it.
    options.host = environment.masterAddr;
    options.port = static_cast<std::uint16_t>(environment.masterPort);
    if (environment.rank == 0) {
      holder->daemon.emplace("0.0.0.0", options.port, environment.token);
      options.host = "127.0.0.1";
    }
  }
  holder->client.emplace(options);
  holder->store.emplace(*holder->client, attemptPrefix(environment) + groupPrefix);
  return std::shared_ptr<rendezvous::Store>(holder, &*holder->store);
}

}  // namespace ddprun::worker
