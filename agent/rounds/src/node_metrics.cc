#include "ddprun/agent/rounds/node_metrics.h"

#include "ddprun/rendezvous/messages.h"
#include "ddprun/rendezvous/metrics_endpoint.h"

namespace ddprun::agent {

NodeMetrics::NodeMetrics(boost::asio::io_context& io, std::uint16_t port, std::string runId,
                         std::string node, std::function<std::string()> counters)
    : endpoint_(std::make_unique<rendezvous::MetricsEndpoint>(
          io, "0.0.0.0", port,
          [runId = std::move(runId), node = std::move(node), counters = std::move(counters)] {
            rendezvous::NodeCounterSeries series{runId, node, {}};
            for (const auto& [name, value] : rendezvous::protocol::parseCounters(counters())) {
              series.counters[name] = value;
            }
            return rendezvous::downtimeMetrics({series});
          })) {}

NodeMetrics::~NodeMetrics() { endpoint_->close(); }

std::uint16_t NodeMetrics::port() const { return endpoint_->port(); }

}  // namespace ddprun::agent
