#include "ddprun/agent/features/node_notes/node_notes.h"

#include <iostream>
#include <utility>

#include "ddprun/common/logging.h"

namespace ddprun::agent {

JobNotices::JobNotices(bool multiNode, std::string openStore, std::string guard)
    : openStore_(std::move(openStore)), guard_(std::move(guard)), said_(!multiNode) {
  if (!multiNode && !guard_.empty()) DDPRUN_INFO("Notice: {}.", guard_);
}

void JobNotices::roundAssigned(const rendezvous::protocol::Assignment& assigned) {
  if (std::exchange(said_, true) || assigned.groupRank != 0) return;
  if (!openStore_.empty()) std::cerr << "ddprun: notice: " << openStore_ << "\n";
  if (!guard_.empty()) DDPRUN_INFO("Notice: {} (on this node; likely on every node).", guard_);
}

void RelayLossNote::heard(const FeatureFact& fact) {
  const auto* lost = std::get_if<RelayLost>(&fact);
  if (lost == nullptr) return;
  for (const auto& worker : workers_.watched()) workers_.noteCause(worker.localRank, lost->why);
}

void TheJobStoresCounters::heard(const FeatureFact& fact) {
  if (const auto* changed = std::get_if<CountersChanged>(&fact))
    store_.publishCounters(changed->text);
}

NodeMetricsFeature::NodeMetricsFeature(boost::asio::io_context& io, std::uint16_t port,
                                       std::string runId, std::string node,
                                       const NodeCountersSource& counters)
    : metrics_(std::make_unique<NodeMetrics>(io, port, std::move(runId), std::move(node),
                                             [&counters] { return counters.countersText(); })) {
  DDPRUN_INFO("This node's metrics are at http://0.0.0.0:{}/metrics.", metrics_->port());
}

}  // namespace ddprun::agent
