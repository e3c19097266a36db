// RendezvousClient: an agent's side of the rendezvous (docs/protocol.md
// §10b) on its own authenticated connection: JOIN a round, LEAVE, REPORT a
// failure, ask who has joined, and receive the events the server pushes.
// The same connection carries the key-value calls of store() (the agent
// waits on a control key there), so heartbeats, events and calls share it.
//
// Example:
//   RendezvousClient agent(options);         // connects and authenticates
//   auto assignment = agent.join(request, std::chrono::minutes(10));
//   while (auto event = agent.waitEvent(std::chrono::seconds(5))) { ... }
//
// Thread-safety: every call may run on any thread at once (one thread may
// block in waitEvent() while another joins or reports).
// Ownership: owns its StoreClient and so its connection.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/rendezvous_backend.h"
#include "ddprun/rendezvous/store_client.h"

namespace ddprun::rendezvous {

class RendezvousClient final : public RendezvousBackend {
 public:
  // Connects and authenticates with the agents' token (see StoreClient).
  explicit RendezvousClient(StoreClientOptions options) : store_(std::move(options)) {}
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  // Blocks until this node's round is complete (or TimeoutError after
  // `timeout`; RendezvousClosedError when the job already failed).
  protocol::Assignment join(const protocol::JoinRequest& request,
                            std::chrono::milliseconds timeout) override;
  // The node is done: it leaves without ending the round for the others.
  void leave(const protocol::NodeReport& report) override;
  // A worker of this node failed in `report.round`: whether the job may
  // restart, and how many restarts it has used.
  protocol::RestartDecision reportFailure(const protocol::NodeReport& report) override;
  // Who has joined rendezvous `rdzvId`'s round being formed.
  protocol::RendezvousStatus status(const std::string& rdzvId, bool details = false) override;
  // The next event the server pushed, or nullopt after `timeout`.
  std::optional<protocol::Event> waitEvent(std::chrono::milliseconds timeout) override;
  // A PING: the server counts it as a heartbeat.
  void keepAlive(std::chrono::steady_clock::time_point deadline) override { store_.ping(deadline); }
  void waitUntilAllLeft(const std::string& rdzvId, std::chrono::milliseconds timeout) override;
  void publishNodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                           const std::string& nodeId, const std::string& text) override {
    store_.set(protocol::nodeCountersKey(kind, rdzvId, nodeId), text);
  }
  std::vector<std::string> nodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                                        const std::vector<std::string>& nodeIds) override;
  // The store's keys go with the store: they never expire on their own.
  std::optional<std::chrono::seconds> jobExpiresIn(const std::string&) override {
    return std::nullopt;
  }
  std::string localAddress() override { return store_.localAddress(); }
  void shutdown() override { store_.shutdown(); }

  // The key-value calls on the same connection.
  StoreClient& store() { return store_; }

 private:
  StoreClient store_;
};

}  // namespace ddprun::rendezvous
