// renderMetrics: the store server's metrics in Prometheus text format (its
// connections, operations, memory, rendezvous, and the nodes' counters),
// for its MetricsEndpoint (docs/operations.md lists them).
//
// Thread-safety: the server's loop thread (it reads the live state).
#pragma once

#include <string>

namespace ddprun::rendezvous {

struct ServerContext;
class RendezvousManager;
std::string renderMetrics(const ServerContext& context, const RendezvousManager* rendezvous);

}  // namespace ddprun::rendezvous
