// RendezvousRounds: the rounds of a node of a multi-node job, from its
// NodeRendezvous (the job's store or etcd): each join offers this node's
// workers' store (used if it becomes group rank 0) and says which round it
// got; failures and the restart budget are the job's.
//
// Thread-safety: the agent's loop thread only; answers are posted to it.
// Ownership: borrows the rendezvous and the store (may be null), which must
// outlive it.
#pragma once

#include <functional>

#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/rounds/attempt_store.h"
#include "ddprun/agent/rounds/node_rendezvous.h"
#include "ddprun/agent/rounds/rounds_settings.h"

namespace ddprun::agent {

class RendezvousRounds : public RoundSource {
 public:
  // `assigned` hears of each round this node got, before the lifecycle.
  RendezvousRounds(NodeRendezvous& rendezvous, AttemptStore* workersStore,
                   const RoundsSettings& config,
                   std::function<void(const rendezvous::protocol::Assignment&)> assigned);

  void join(std::function<void(JoinResult)> done) override;
  void reportFailure(const FailureNotice& failure,
                     std::function<void(FailureAnswer)> done) override;
  void leave(std::int64_t round, int exitCode, std::function<void()> done) override;
  bool hosting() const override { return rendezvous_.hosting(); }
  void waitUntilAllLeft(std::function<void()> done) override;
  // The job's store (c10d), or with etcd group rank 0's (MASTER_ADDR:PORT);
  // the keys under <run id>/round_<round>/.
  WorkersStore workersStore(const rendezvous::protocol::Assignment& round) const override;
  std::string restartMessage(std::int64_t restarts, int maxRestarts) const override;

 private:
  NodeRendezvous& rendezvous_;
  AttemptStore* workersStore_;
  const RoundsSettings settings_;
  std::function<void(const rendezvous::protocol::Assignment&)> assigned_;
  std::int64_t hostedRound_ = -1;  // the round whose workers' store this node serves

  // One line: how many connections the workers' store of `round` took, if
  // this node served it.
  void noteWorkersStore(std::int64_t round) const;
};

}  // namespace ddprun::agent
