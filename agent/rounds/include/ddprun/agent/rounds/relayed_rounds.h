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

#include <boost/asio/io_context.hpp>

#include <memory>
#include <string>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/rendezvous/node_relay.h"

namespace ddprun::agent {

class RelayedRounds : public RoundSource {
 public:
  // `token`: what the round's store requires of agents (empty: open).
  // `publish` (may be empty) gets the relay's counters as text every few
  // seconds and when a round's relay stops, on the relay's thread.
  RelayedRounds(boost::asio::io_context& io, std::unique_ptr<RoundSource> inner, std::string token,
                std::function<void(std::string)> publish = {});
  ~RelayedRounds() override;

  void join(std::function<void(JoinResult)> done) override;
  void reportFailure(const FailureNotice& failure,
                     std::function<void(FailureAnswer)> done) override {
    inner_->reportFailure(failure, std::move(done));
  }
  void leave(std::int64_t round, int exitCode, std::function<void()> done) override;
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
  rendezvous::RelayCounters counters();
  // `facts` hears, on the agent's loop, why a round's relay lost the
  // workers' store (RelayLost: "this node's relay lost the workers' store
  // at H:P: why"): the node's workers fail next, and their report says so.
  void tellLossesTo(FactSink& facts) { facts_ = &facts; }

 private:
  boost::asio::io_context& io_;
  std::unique_ptr<RoundSource> inner_;
  std::string token_;
  std::function<void(std::string)> publish_;
  FactSink* facts_ = nullptr;
  std::uint64_t relays_ = 0;  // relays started: a late loss of an old one is ignored
  std::unique_ptr<rendezvous::RelayThread> relay_;
  rendezvous::protocol::Assignment innerAssignment_;  // the current round, as the inner gave it
};

}  // namespace ddprun::agent
