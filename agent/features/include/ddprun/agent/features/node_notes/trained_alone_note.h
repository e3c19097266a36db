// TrainedAloneNote: Python workers of a job of several that all succeeded
// without one of them connecting to the workers' store formed no process
// group: each trained alone (Lightning on CPU with devices="auto"). Says so
// on the node that served that store, naming Trainer(devices=, num_nodes=)
// (docs/frameworks.md).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/workers_store_view.h"

namespace ddprun::agent {

class TrainedAloneNote : public Feature {
 public:
  struct Settings {
    bool pythonOnTheAgentStore = false;  // Python workers that use the agent's store
    int localWorkers = 1;
  };
  TrainedAloneNote(Settings settings, const WorkersStoreView& store)
      : settings_(settings), store_(store) {}
  void attemptEnded(const Attempt& attempt, const GroupOutcome& outcome) override;

 private:
  const Settings settings_;
  const WorkersStoreView& store_;
};

}  // namespace ddprun::agent
