// Small features that say things about the node and the job:
// - JobNotices: what holds for every node (an open store, the workers'
//   guard's limits) is said once per job, by the node that is group rank 0
//   in its first round; a node alone says its notice at once.
// - RelayLossNote: when the node's relay loses the workers' store
//   (RelayLost), every running worker's failure names it.
// - TheJobStoresCounters: each change of the node's counters
//   (CountersChanged) goes to the job's store, which serves every node's at
//   /metrics and in `ddprun status`.
// - NodeMetricsFeature: a node alone with --metrics_port serves its own
//   counters (NodeMetrics).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/node_notes/node_metrics.h"

namespace ddprun::agent {

class JobNotices : public Feature {
 public:
  // `openStore`: the store serves clients without a token ("": it does not);
  // `guard`: the workers' guard's notice ("": none).
  JobNotices(bool multiNode, std::string openStore, std::string guard);
  void roundAssigned(const rendezvous::protocol::Assignment& assigned) override;

 private:
  const std::string openStore_;
  const std::string guard_;
  bool said_;
};

class RelayLossNote : public Feature {
 public:
  explicit RelayLossNote(RunningWorkers& workers) : workers_(workers) {}
  void heard(const FeatureFact& fact) override;

 private:
  RunningWorkers& workers_;
};

class TheJobStoresCounters : public Feature {
 public:
  explicit TheJobStoresCounters(NodeCountersSink& store) : store_(store) {}
  void heard(const FeatureFact& fact) override;

 private:
  NodeCountersSink& store_;
};

class NodeMetricsFeature : public Feature {
 public:
  // Throws ddprun::NetworkError naming the port when it cannot bind it.
  NodeMetricsFeature(boost::asio::io_context& io, std::uint16_t port, std::string runId,
                     std::string node, const NodeCountersSource& counters);
  std::uint16_t port() const { return metrics_->port(); }

 private:
  std::unique_ptr<NodeMetrics> metrics_;
};

}  // namespace ddprun::agent
