#include "ddprun/agent/features/node_notes/node_metrics.h"

#include "ddprun/common/node_telemetry.h"
#include "ddprun/rendezvous/metrics_endpoint.h"

namespace ddprun::agent {

NodeMetrics::NodeMetrics(boost::asio::io_context& io, std::uint16_t port, std::string runId,
                         std::string node, std::function<std::string()> counters)
    : endpoint_(std::make_unique<rendezvous::MetricsEndpoint>(
          io, "0.0.0.0", port,
          [runId = std::move(runId), node = std::move(node), counters = std::move(counters)] {
            const auto decoded = telemetry::decodeDowntimeCounters(counters());
            if (!decoded) return std::string();
            return rendezvous::downtimeMetrics({{runId, node, *decoded}});
          })) {}

NodeMetrics::~NodeMetrics() { endpoint_->close(); }

std::uint16_t NodeMetrics::port() const { return endpoint_->port(); }

}  // namespace ddprun::agent
