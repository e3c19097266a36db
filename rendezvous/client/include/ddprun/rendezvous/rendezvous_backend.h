// RendezvousBackend: where an agent's rendezvous lives, as the agent sees
// it. Two implementations: RendezvousClient (ddprun's store computes the
// rounds, docs/protocol.md) and EtcdRendezvous (the rounds live in etcd,
// docs/multinode.md). The agent's NodeRendezvous drives either the same way,
// through this interface only: join, report, leave and waitUntilAllLeft on
// its worker thread, keepAlive() on another, waitEvent() on a third.
//
// Thread-safety: every call may run on any thread at once; shutdown() makes
// blocked calls on other threads return (or throw) promptly.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/messages.h"

namespace ddprun::rendezvous {

class RendezvousBackend {
 public:
  virtual ~RendezvousBackend() = default;

  // Blocks until this node's round is complete: TimeoutError after
  // `timeout`, RendezvousClosedError when the job already failed,
  // NodeExcludedError when this host is left out for a cooldown.
  virtual protocol::Assignment join(const protocol::JoinRequest& request,
                                    std::chrono::milliseconds timeout) = 0;
  // The node is done: it leaves without ending the round for the others.
  virtual void leave(const protocol::NodeReport& report) = 0;
  // A worker of this node failed in `report.round`: whether the job may
  // restart, and how many restarts it has used.
  virtual protocol::RestartDecision reportFailure(const protocol::NodeReport& report) = 0;
  // Rendezvous `rdzvId`'s round being formed; `details`: also its members,
  // restarts and last failure.
  virtual protocol::RendezvousStatus status(const std::string& rdzvId, bool details = false) = 0;
  // The next event for this node, or nullopt after `timeout`. Throws
  // ddprun::Error when the rendezvous can no longer be reached.
  virtual std::optional<protocol::Event> waitEvent(std::chrono::milliseconds timeout) = 0;
  // Tells the rendezvous this node is alive (a heartbeat, a lease renewal).
  // Throws ddprun::Error when that is no longer possible, TimeoutError when
  // the rendezvous has not confirmed it by `deadline` (a silent network: the
  // others are about to count this node as lost).
  virtual void keepAlive(std::chrono::steady_clock::time_point deadline) = 0;
  // Blocks until every node of rendezvous `rdzvId` has left it (the node
  // that hosts the store waits so before it closes the store), TimeoutError
  // after `timeout`. Returns at once where nothing is hosted (etcd).
  virtual void waitUntilAllLeft(const std::string& rdzvId, std::chrono::milliseconds timeout) = 0;
  // Keeps counters about node `nodeId` (protocol::nodeCountersKey: its
  // relay's, its downtime's) where the rendezvous lives, for `ddprun status`
  // and the store's metrics; they go with the node (etcd: on its lease).
  // Throws ddprun::Error when the rendezvous cannot be reached.
  virtual void publishNodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                                   const std::string& nodeId, const std::string& text) = 0;
  // The texts publishNodeCounters() kept for `nodeIds`, in order ("" for
  // none).
  virtual std::vector<std::string> nodeCounters(protocol::NodeCounters kind,
                                                const std::string& rdzvId,
                                                const std::vector<std::string>& nodeIds) = 0;
  // How long the keys of rendezvous `rdzvId` outlive its nodes from now,
  // where they expire on their own (etcd: the job lease's remaining TTL);
  // nullopt where they do not (the store's end with the store) or when
  // there is none. For `ddprun status`.
  virtual std::optional<std::chrono::seconds> jobExpiresIn(const std::string& rdzvId) = 0;
  // The address of this host that the rendezvous reaches it at: where its
  // connection leaves from ("" before the first join).
  virtual std::string localAddress() = 0;
  // Unblocks every call in progress; later calls fail.
  virtual void shutdown() = 0;
};

}  // namespace ddprun::rendezvous
