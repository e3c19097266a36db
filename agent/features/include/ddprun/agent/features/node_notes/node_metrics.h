// NodeMetrics: a single node's Prometheus endpoint (--metrics_port on one
// node, docs/operations.md "Metrics"): where a multi-node job's store
// serves every node's counters, a node alone has no shared store, so its
// agent serves its own downtime at http://0.0.0.0:PORT/metrics, rendered
// as the store renders it (rendezvous::downtimeMetrics).
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the endpoint, closed on destruction.
#pragma once

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ddprun::rendezvous {
class MetricsEndpoint;
}

namespace ddprun::agent {

class NodeMetrics {
 public:
  // `counters`: the node's downtime counters text (DowntimeFeature's),
  // read at each request. Binds 0.0.0.0:`port` (0: a free port) at once;
  // throws ddprun::NetworkError naming the port when it cannot.
  NodeMetrics(boost::asio::io_context& io, std::uint16_t port, std::string runId, std::string node,
              std::function<std::string()> counters);
  ~NodeMetrics();
  NodeMetrics(const NodeMetrics&) = delete;
  NodeMetrics& operator=(const NodeMetrics&) = delete;

  std::uint16_t port() const;

 private:
  std::unique_ptr<rendezvous::MetricsEndpoint> endpoint_;
};

}  // namespace ddprun::agent
