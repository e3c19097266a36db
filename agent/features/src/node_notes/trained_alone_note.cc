#include "ddprun/agent/features/node_notes/trained_alone_note.h"

#include "ddprun/common/logging.h"

namespace ddprun::agent {

void TrainedAloneNote::attemptEnded(const Attempt& attempt, const GroupOutcome& outcome) {
  if (!outcome.succeeded) return;
  if (!settings_.pythonOnTheAgentStore || attempt.assignment.worldSize < 2) return;
  if (attempt.assignment.groupRank != 0) return;
  const auto connections = store_.workerConnections();
  if (!connections || *connections > 0) return;
  DDPRUN_WARN(
      "The {} workers finished without any of them connecting to the store at MASTER_ADDR:"
      "MASTER_PORT, so they formed no process group: each ran alone, as a world of one. If they "
      "were meant to train together: PyTorch Lightning does this on CPU with devices=\"auto\" "
      "(one device per process, silently): give Trainer(devices={}, num_nodes={}) "
      "(docs/frameworks.md).",
      attempt.assignment.worldSize, settings_.localWorkers, attempt.assignment.groupWorldSize);
}

}  // namespace ddprun::agent
