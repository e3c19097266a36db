#include "ddprun/agent/rounds/node_rounds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "ddprun/agent/rounds/free_port.h"
#include "ddprun/agent/rounds/local_rounds.h"
#include "ddprun/agent/rounds/network_interface.h"
#include "ddprun/agent/rounds/rendezvous_rounds.h"
#include "ddprun/common/env.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/store_server.h"

namespace ddprun::agent {

namespace protocol = rendezvous::protocol;

NodeRounds makeLocalRounds(boost::asio::io_context& io, const RoundsSettings& config) {
  NodeRounds rounds;
  const std::string token = randomToken();
  rounds.workerToken = workerCredential(token, config.runId);
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
  rounds.attemptStore = std::make_unique<AttemptStore>(options);
  rounds.attemptStore->fresh();  // binds now: a taken --master_port fails before any worker starts
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
  rounds.source = std::make_unique<LocalRounds>(
      io, *rounds.attemptStore, base, config.useAgentStore, config.maxRestarts, config.runId);
  if (config.relayWorkersStore) {
    auto relayed = std::make_unique<RelayedRounds>(io, std::move(rounds.source), token);
    rounds.relayed = relayed.get();
    rounds.source = std::move(relayed);
  }
  return rounds;
}

NodeRounds makeRendezvousRounds(boost::asio::io_context& io, const RoundsSettings& config,
                                std::function<void(const protocol::Assignment&)> onAssigned) {
  NodeRounds rounds;
  rounds.rendezvous = std::make_unique<NodeRendezvous>(io, config);
  rounds.workerToken = workerCredential(config.rendezvous.token, config.runId);
  if (config.useAgentStore || !rounds.rendezvous->jobStore()) {
    // Served by whichever node becomes group rank 0, on every address (the
    // others reach it at the address the rendezvous knows that node by).
    // With etcd this is the only store the workers have.
    rendezvous::StoreServerOptions options;
    options.host = anyAddressOfTheJobsFamily(config.rendezvous);
    // Only PyTorch's TCPStore clients (which cannot send a token) use it,
    // so it is open like torchrun's own store; the limits still hold.
    options.name = "ddprun-worker-store";
    options.quiet = true;
    if (config.relayWorkersStore) {
      // Only the nodes' relays reach it, with the agents' token: no
      // unauthenticated client is served from the network.
      options.token = config.rendezvous.token;
    }
    rounds.attemptStore = std::make_unique<AttemptStore>(options);
  }
  rounds.source = std::make_unique<RendezvousRounds>(*rounds.rendezvous, rounds.attemptStore.get(),
                                                     config, std::move(onAssigned));
  if (config.relayWorkersStore) {
    auto relayed = std::make_unique<RelayedRounds>(
        io, std::move(rounds.source), config.rendezvous.token,
        [rendezvous = rounds.rendezvous.get()](std::string text) {
          rendezvous->publishNodeCounters(rendezvous::protocol::NodeCounters::kRelay,
                                          std::move(text));
        });
    rounds.relayed = relayed.get();
    rounds.source = std::move(relayed);
  }
  return rounds;
}

NodeRounds makeNodeRounds(boost::asio::io_context& io, const RoundsSettings& config,
                          std::function<void(const protocol::Assignment&)> onAssigned) {
  if (config.rendezvous.mode == RendezvousMode::kStandalone) return makeLocalRounds(io, config);
  return makeRendezvousRounds(io, config, std::move(onAssigned));
}

std::string socketInterfaceFor(const std::string& address) {
  const std::string name = interfaceWithAddress(address).value_or("");
  if (name.empty()) return name;
  std::vector<std::string> chosen;  // the variables the user left to ddprun
  for (const char* variable : {env::kGlooSocketIfname, env::kNcclSocketIfname}) {
    if (std::getenv(variable) == nullptr) chosen.emplace_back(variable);
  }
  if (!chosen.empty()) {
    DDPRUN_INFO(
        "Workers' sockets use {} ({}), the interface of {}, this node's address in the "
        "rendezvous; set the variable to choose another.",
        name, fmt::join(chosen, ", "), address);
  }
  return name;
}

std::optional<std::uint64_t> NodeRounds::workerConnections() const {
  if (!attemptStore) return std::nullopt;
  return relayed ? relayed->counters().connectionsAccepted : attemptStore->connectionsAccepted();
}

}  // namespace ddprun::agent
