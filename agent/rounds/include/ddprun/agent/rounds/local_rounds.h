// LocalRounds: the rounds of a node that runs alone (--standalone, or one
// node without a rendezvous): every "round" is one attempt, whose workers
// start on a store no earlier worker touched (AttemptStore), and the restart
// budget (--max_restarts) is counted here.
//
// Thread-safety: the agent's loop thread only; answers are posted to it.
// Ownership: borrows the store, which must outlive it.
#pragma once

#include <boost/asio/io_context.hpp>

#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/rounds/attempt_store.h"

namespace ddprun::agent {

class LocalRounds : public RoundSource {
 public:
  // `base`: the workers' MASTER_ADDR/PORT and world size; with
  // `agentStoreIsMaster` the workers' MASTER_PORT is each attempt's store.
  LocalRounds(boost::asio::io_context& io, AttemptStore& store,
              rendezvous::protocol::Assignment base, bool agentStoreIsMaster, int maxRestarts,
              std::string runId);

  void join(std::function<void(JoinResult)> done) override;
  void reportFailure(const FailureNotice& failure,
                     std::function<void(FailureAnswer)> done) override;
  void leave(std::int64_t round, int exitCode, std::function<void()> done) override;
  bool hosting() const override { return false; }
  void waitUntilAllLeft(std::function<void()> done) override;
  // The private store of this attempt, its keys under <run id>/attempt_<restarts>/.
  WorkersStore workersStore(const rendezvous::protocol::Assignment& round) const override;
  std::string restartMessage(std::int64_t restarts, int maxRestarts) const override;

 private:
  boost::asio::io_context& io_;
  AttemptStore& store_;
  rendezvous::protocol::Assignment base_;
  bool agentStoreIsMaster_;
  int maxRestarts_;
  std::string runId_;
  std::int64_t restarts_ = 0;
};

}  // namespace ddprun::agent
