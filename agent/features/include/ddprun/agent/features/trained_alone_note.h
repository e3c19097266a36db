// TrainedAloneNote: Python workers of a job of several that all succeeded
// without one of them connecting to the workers' store formed no process
// group: each trained alone (Lightning on CPU with devices="auto"). Says so
// on the node that served that store, naming Trainer(devices=, num_nodes=)
// (docs/frameworks.md).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/workers_store_view.h"

namespace ddprun::agent {

class TrainedAloneNote : public Feature {
 public:
  TrainedAloneNote(const AgentConfig& config, const WorkersStoreView& store)
      : config_(config), store_(store) {}
  void attemptEnded(const Attempt& attempt, const GroupOutcome& outcome) override;

 private:
  const AgentConfig& config_;
  const WorkersStoreView& store_;
};

}  // namespace ddprun::agent
