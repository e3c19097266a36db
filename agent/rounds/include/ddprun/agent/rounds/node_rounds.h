// NodeRounds: what this node's rounds are made of, built for its mode.
//   - One node (makeLocalRounds): a private store on 127.0.0.1, new for each
//     attempt (AttemptStore), and LocalRounds, which counts --max_restarts
//     here. MASTER_ADDR/MASTER_PORT: that store with the agent store, else
//     --master_addr and --master_port (or a free port).
//   - Several nodes (makeRendezvousRounds): the job's rendezvous
//     (NodeRendezvous: the job's store or etcd) and RendezvousRounds, with
//     the workers' store served by whichever node is group rank 0 when the
//     workers use the agent store (always with etcd).
// Workers never get the agents' token: workerToken is a credential for this
// job's keys only.
//
// Also: the interface for the workers' Gloo and NCCL sockets, and what the
// features may know of the workers' store.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <functional>
#include <memory>
#include <string>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/core/workers_store_view.h"
#include "ddprun/agent/rounds/attempt_store.h"
#include "ddprun/agent/rounds/node_rendezvous.h"
#include "ddprun/agent/rounds/relayed_rounds.h"
#include "ddprun/agent/rounds/rounds_settings.h"

namespace ddprun::agent {

// Also the workers' store as the features see it (WorkersStoreView): the
// attempt's store served here, or the relay in front of it.
struct NodeRounds : WorkersStoreView {
  std::unique_ptr<AttemptStore> attemptStore;  // null: the workers use the job's store
  std::unique_ptr<NodeRendezvous> rendezvous;  // several nodes only
  std::unique_ptr<RoundSource> source;
  RelayedRounds* relayed = nullptr;  // `source`, when the workers' store is relayed
  std::string workerToken;

  std::optional<std::uint64_t> workerConnections() const override;
};

// The rounds of this node's mode: local for a standalone node (then
// `onAssigned` is never called), else the job's rendezvous.
NodeRounds makeNodeRounds(boost::asio::io_context& io, const RoundsSettings& config,
                          std::function<void(const rendezvous::protocol::Assignment&)> onAssigned);
// Throws ddprun::Error when the store cannot listen (a taken --master_port).
NodeRounds makeLocalRounds(boost::asio::io_context& io, const RoundsSettings& config);
NodeRounds makeRendezvousRounds(
    boost::asio::io_context& io, const RoundsSettings& config,
    std::function<void(const rendezvous::protocol::Assignment&)> onAssigned);

// The interface that carries `address` (this node's address in the
// rendezvous), for the workers' GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME;
// says so in the log when ddprun chooses one; "" when none.
std::string socketInterfaceFor(const std::string& address);

}  // namespace ddprun::agent
