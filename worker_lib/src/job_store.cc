#include "job_store.h"

#include <fmt/format.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store_client.h"
#include "hosted_daemon.h"
#include "native_c10d_store.h"

namespace ddprun::worker {

namespace {

enum class Kind { kDdprun, kHostedDaemon, kTcpStore };

Kind kindOf(const Environment& environment) {
  if (!environment.storeHost.empty() && environment.storePort > 0) return Kind::kDdprun;
  if (!environment.token.empty()) return Kind::kHostedDaemon;
  return Kind::kTcpStore;
}

// torchrun (1.13 with a static rendezvous, and every 2.x) says whether its
// agent hosts the store at MASTER_ADDR:MASTER_PORT.
bool agentHostsTheStore() {
  const char* value = std::getenv(env::kUseAgentStore);
  return value != nullptr && (std::strcmp(value, "True") == 0 || std::strcmp(value, "1") == 0);
}

std::string attemptPrefix(const Environment& environment) {
  if (!environment.storePrefix.empty()) return environment.storePrefix;
  const char* runId = std::getenv(env::kRunId);
  if (runId == nullptr) runId = std::getenv("SLURM_JOB_ID");
  return fmt::format("ddprun/{}/attempt_{}/", runId ? runId : "job", environment.restartCount);
}

// ddprun's native client (and the daemon rank 0 hosts, if any), kept alive
// together behind one rendezvous::Store.
struct NativeStore {
  std::optional<HostedDaemon> daemon;
  std::optional<rendezvous::StoreClient> client;
};

c10::intrusive_ptr<c10d::Store> connectNative(const Environment& environment,
                                              std::chrono::milliseconds timeout) {
  auto holder = std::make_shared<NativeStore>();
  rendezvous::StoreClientOptions options;
  options.token = environment.token;
  options.connectTimeout = timeout;
  options.name = fmt::format("worker rank {}", environment.rank);
  if (kindOf(environment) == Kind::kDdprun) {
    options.host = environment.storeHost;
    options.port = static_cast<std::uint16_t>(environment.storePort);
  } else {
    options.host = environment.masterAddr;
    options.port = static_cast<std::uint16_t>(environment.masterPort);
    if (environment.rank == 0) {
      holder->daemon.emplace("0.0.0.0", options.port, environment.token);
      options.host = "127.0.0.1";
    }
  }
  holder->client.emplace(options);
  std::shared_ptr<rendezvous::Store> store(holder, &*holder->client);
  return c10::make_intrusive<NativeC10dStore>(std::move(store), timeout);
}

// Which of the three the environment selects, for messages.
std::string describeJobStore(const Environment& environment) {
  switch (kindOf(environment)) {
    case Kind::kDdprun:
      return fmt::format("ddprun's store at {}:{}", environment.storeHost, environment.storePort);
    case Kind::kHostedDaemon:
      return fmt::format("ddprun-rendezvous hosted by rank 0 at {}:{}", environment.masterAddr,
                         environment.masterPort);
    case Kind::kTcpStore:
      return fmt::format("PyTorch's TCPStore at {}:{} ({})", environment.masterAddr,
                         environment.masterPort,
                         agentHostsTheStore() ? "torchrun's agent store" : "hosted by rank 0");
  }
  return "?";
}

c10::intrusive_ptr<c10d::Store> connectTcpStore(const Environment& environment,
                                                std::chrono::milliseconds timeout) {
  if (environment.masterAddr.empty() || environment.masterPort <= 0) {
    throw ConfigError(fmt::format(
        "{} has no MASTER_ADDR/MASTER_PORT, so there is no store to meet the other ranks at; "
        "launch with ddprun or torchrun, or export MASTER_ADDR and MASTER_PORT",
        environment.describe()));
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(environment.masterPort);
  options.isServer = environment.rank == 0 && !agentHostsTheStore();
  options.numWorkers = environment.worldSize;
  options.waitWorkers = false;
  options.timeout = timeout;
#if TORCH_VERSION_MAJOR >= 2
  // PyTorch's own switch, as torch.distributed's env:// reads it: LibTorch
  // 2.x defaults to its libuv backend, which a build without libuv refuses.
  if (const char* libuv = std::getenv("USE_LIBUV")) options.useLibUV = std::strcmp(libuv, "0") != 0;
#endif
  try {
    return c10::make_intrusive<c10d::TCPStore>(environment.masterAddr, options);
  } catch (const std::exception& e) {
    throw NetworkError(fmt::format("rank {} could not reach {}: {}", environment.rank,
                                   describeJobStore(environment), e.what()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connectJobStore(const Environment& environment,
                                                const std::string& groupPrefix,
                                                std::chrono::milliseconds timeout) {
  if (!environment.distributed || environment.worldSize == 1) return {};
  auto base = kindOf(environment) == Kind::kTcpStore ? connectTcpStore(environment, timeout)
                                                     : connectNative(environment, timeout);
  // c10d's PrefixStore puts its own "/" between the prefix and a key.
  std::string prefix = attemptPrefix(environment) + groupPrefix;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(base));
}

}  // namespace ddprun::worker
