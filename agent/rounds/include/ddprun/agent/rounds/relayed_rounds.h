// RelayedRounds: the rounds of another RoundSource with this node's workers
// reaching their store through the node relay (ddprun/agent/relay): for
// each round a fresh relay on 127.0.0.1 carries their connections (PyTorch's
// TCPStore and ddprun's native protocol) to the round's store
// (MASTER_ADDR:MASTER_PORT of the inner assignment) over one connection
// authenticated with the agents' token, and the workers are given the relay
// as MASTER_ADDR:MASTER_PORT and DDPRUN_STORE_HOST:PORT. Everything else is
// the inner source's (docs/multinode.md, "The node relay").
//
// Thread-safety: the agent's loop thread only (the relay has its own).
// Ownership: owns the inner source and the current round's relay.
#pragma once

#include <memory>
#include <string>

#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/relay/node_relay.h"

namespace ddprun::agent {

class RelayedRounds : public RoundSource {
 public:
  // `token`: what the round's store requires of agents (empty: open).
  // `publish` (may be empty) gets the relay's counters as text every few
  // seconds and when a round's relay stops, on the relay's thread.
  RelayedRounds(std::unique_ptr<RoundSource> inner, std::string token,
                std::function<void(std::string)> publish = {});
  ~RelayedRounds() override;

  void join(std::function<void(JoinResult)> done) override;
  void reportFailure(std::int64_t round, const WorkerFailure& root, const std::string& report,
                     std::function<void(FailureAnswer)> done) override {
    inner_->reportFailure(round, root, report, std::move(done));
  }
  void leave(std::int64_t round, std::function<void()> done) override;
  bool hosting() const override { return inner_->hosting(); }
  void waitUntilAllLeft(std::function<void()> done) override {
    inner_->waitUntilAllLeft(std::move(done));
  }
  // The relay, with the inner source's prefix for the round (native
  // workers' credentials are checked by the relay, docs/security.md).
  WorkersStore workersStore(const rendezvous::protocol::Assignment& round) const override;
  std::string restartMessage(std::int64_t restarts, int maxRestarts) const override {
    return inner_->restartMessage(restarts, maxRestarts);
  }
  // The current round's relay counters (none: zero).
  RelayCounters counters();

 private:
  std::unique_ptr<RoundSource> inner_;
  std::string token_;
  std::function<void(std::string)> publish_;
  std::unique_ptr<RelayThread> relay_;
  rendezvous::protocol::Assignment innerAssignment_;  // the current round, as the inner gave it
};

}  // namespace ddprun::agent
