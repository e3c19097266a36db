#include "ddprun/agent/rounds/rendezvous_rounds.h"

#include <fmt/format.h>

#include "ddprun/common/logging.h"

namespace ddprun::agent {

RendezvousRounds::RendezvousRounds(
    NodeRendezvous& rendezvous, AttemptStore* workersStore, const RoundsSettings& config,
    std::function<void(const rendezvous::protocol::Assignment&)> assigned)
    : rendezvous_(rendezvous),
      workersStore_(workersStore),
      settings_(config),
      assigned_(std::move(assigned)) {}

void RendezvousRounds::join(std::function<void(JoinResult)> done) {
  DDPRUN_INFO("Node {} is joining rendezvous '{}' ({} to {} nodes).", rendezvous_.nodeId(),
              settings_.runId, settings_.rendezvous.minNodes, settings_.rendezvous.maxNodes);
  // This node's offer of a store for the round's workers, used if it
  // becomes group rank 0.
  if (workersStore_ != nullptr) {
    noteWorkersStore(hostedRound_);  // the round before, ended without leaving
    hostedRound_ = -1;
    rendezvous_.setMasterPort(workersStore_->fresh());
  }
  rendezvous_.asyncJoin([this, done = std::move(done)](JoinResult result) {
    if (result.assignment) {
      const auto& a = *result.assignment;
      if (workersStore_ != nullptr && a.groupRank == 0) {
        workersStore_->markUsed();
        hostedRound_ = a.round;
      }
      assigned_(a);
      DDPRUN_INFO("Round {}: this node is group rank {} of {}; workers are ranks {} to {} of {}.",
                  a.round, a.groupRank, a.groupWorldSize, a.rankOffset,
                  a.rankOffset + settings_.nprocPerNode - 1, a.worldSize);
    }
    done(std::move(result));
  });
}

void RendezvousRounds::reportFailure(const FailureNotice& failure,
                                     std::function<void(FailureAnswer)> done) {
  rendezvous_.asyncReportFailure(failure, std::move(done));
}

void RendezvousRounds::leave(std::int64_t round, int exitCode, std::function<void()> done) {
  noteWorkersStore(round);
  rendezvous_.asyncLeave(round, exitCode, std::move(done));
}

void RendezvousRounds::noteWorkersStore(std::int64_t round) const {
  // Only a round whose workers' store this node served (-1: none).
  if (round < 0 || hostedRound_ != round || workersStore_ == nullptr) return;
  // With relays: one per node (docs/multinode.md, "The node relay").
  DDPRUN_INFO("The workers' store of round {} (served here, group rank 0) took {} connections.",
              round, workersStore_->connectionsAccepted());
}

void RendezvousRounds::waitUntilAllLeft(std::function<void()> done) {
  rendezvous_.asyncWaitUntilAllLeft(std::move(done));
}

WorkersStore RendezvousRounds::workersStore(const rendezvous::protocol::Assignment& round) const {
  const std::string prefix = fmt::format("{}/round_{}/", settings_.runId, round.round);
  if (const auto& store = rendezvous_.jobStore()) return {store->host, store->port, prefix};
  // No ddprun store holds the rounds (etcd): the workers' store is group rank 0's.
  return {round.masterAddr, static_cast<int>(round.masterPort), prefix};
}

std::string RendezvousRounds::restartMessage(std::int64_t restarts, int maxRestarts) const {
  return fmt::format("Restarting the job (restart {} of {}, counted for the whole job).", restarts,
                     maxRestarts);
}

}  // namespace ddprun::agent
