// RendezvousManager: rendezvous rounds computed in the store server.
//
// Agents JOIN a named rendezvous and are answered when their round is
// complete: MAX nodes joined, or MIN joined and either every node expected
// back has rejoined or `last_call` passed. The server assigns group ranks
// (requested node rank first, then order of first arrival, so survivors keep
// their order), rank offsets (nodes may run different numbers of workers),
// and the master address and port (those of group rank 0).
//
// While a round runs, the server ends it and tells every participant at
// once (a pushed kRoundEnded event) when a node fails (REPORT_FAILURE, which
// spends one restart of the job-wide budget the first JOIN fixed; a
// connection may leave or report only for the node it joined as), when a node's connection
// drops or its heartbeats stop, or when a new node asks to join. Membership
// changes never spend restarts. When the budget is spent, every participant
// is pushed kJobFailed with the failing node's report. When the nodes are a
// fixed set (a Slurm job step's: a lost node never returns) and fewer than
// MIN of them are left, the job fails at once in the same way, its report
// naming the lost nodes.
//
// In an elastic job (MIN < MAX) a host (a node's address) whose workers
// failed first (REPORT_FAILURE's failure time; the others' failures were
// knock-on) in max_node_failures rounds in a row is excluded for its
// cooldown when the next round forms, if MIN nodes remain without it:
// every node is pushed kNodeExcluded, that host's JOINs are refused with
// kExcluded, and kNodeReadmitted is pushed when the cooldown ends.
//
// Every one of these rules is the round policy's (ddprun/rendezvous/
// round_policy.h, shared with the etcd backend): this class keeps the
// policy's values per rendezvous, feeds it the steady clock, answers the
// JOINs and pushes the events it decides, and arms one wake timer per
// rendezvous at the deadline it names (the last call, a cooldown's end).
//
// Thread-safety: the server's loop thread only (like StoreState).
// Ownership: owns its timers; borrows Peers, which must call peerLost()
// before they go away.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/store_state.h"

namespace ddprun::rendezvous {

class RendezvousManager {
 public:
  // The server's side of one node's connection. No call of it may call back
  // into this class before it returns (a failed write closes the connection,
  // and so calls peerLost(), on the loop's next turn): the manager pushes
  // and answers while it walks a rendezvous' nodes.
  class Peer {
   public:
    virtual ~Peer() = default;
    virtual void pushEvent(const protocol::Event& event) = 0;
    // Answers a JOIN of a job that has failed: CLOSED with its outcome.
    virtual void answerClosed(std::uint32_t requestId, const protocol::JobFailure& failure) = 0;
    virtual void answerJoin(std::uint32_t requestId, protocol::Status status,
                            const protocol::Assignment& assignment, const std::string& message) = 0;
    virtual const std::string& peerAddress() const = 0;
  };

  // `state` receives protocol::rendezvousFinishedKey(id) when every node of
  // a rendezvous has left.
  RendezvousManager(boost::asio::any_io_executor executor, StoreState& state);
  ~RendezvousManager();
  RendezvousManager(const RendezvousManager&) = delete;
  RendezvousManager& operator=(const RendezvousManager&) = delete;

  // Registers the join; `peer.answerJoin(requestId, ...)` is called when the
  // round completes, the timeout passes (kTimeout) or the job is closed.
  void join(Peer& peer, std::uint32_t requestId, const protocol::JoinRequest& request);
  // The node is done: it leaves the round without ending it for the others.
  protocol::Status leave(Peer& peer, const protocol::NodeReport& report, std::string& message);
  // A worker of the node failed in `report.round`. Sets `decision`: the
  // restarts used so far, and whether the job may restart (false: the
  // budget is spent and the job has failed).
  protocol::Status reportFailure(Peer& peer, const protocol::NodeReport& report,
                                 protocol::RestartDecision& decision, std::string& message);
  // Who has joined the round being formed, and who is known to be missing
  // (for a waiting node's progress line); with `details` also the members,
  // the restart budget and the last failure (`ddprun status`).
  protocol::RendezvousStatus status(const std::string& rdzvId, bool details = false) const;
  // The peer's connection closed or its heartbeats stopped.
  void peerLost(Peer& peer, const std::string& reason);

  std::size_t numRendezvous() const { return rendezvous_.size(); }

  // One rendezvous for /metrics.
  struct Summary {
    std::string id;
    std::int64_t round = 0;
    bool running = false;
    bool closed = false;
    std::size_t members = 0;  // of the running round
    std::size_t joining = 0;  // waiting in JOIN
    std::int64_t restarts = 0;
    std::int64_t maxRestarts = 0;
    std::int64_t failures = 0;  // rounds ended by a worker failure
  };
  std::vector<Summary> summaries() const;

 private:
  struct Node;
  struct Rendezvous;

  Rendezvous& getOrCreate(const protocol::JoinRequest& request);
  Rendezvous* find(const std::string& id);
  // Fills status.missing and missingCount (policy::describeMissing()).
  static void describeMissing(const Rendezvous& r, protocol::RendezvousStatus& status);
  // Fills status's details.
  static void describe(const Rendezvous& r, protocol::RendezvousStatus& status);
  // Asks the policy whether the round being formed is ready and does what
  // it says (exclude a host, form the round); then arms the wake timer.
  void tryComplete(Rendezvous& r);
  void complete(Rendezvous& r, const std::vector<policy::Member>& participants);
  // The wake timer at `atMs` or the next cooldown's end, whichever first.
  void schedule(Rendezvous& r, std::int64_t atMs);
  void onWake(const std::string& rdzvId);
  void endRound(Rendezvous& r, const std::string& reason, const std::string& exceptNode);
  void failJob(Rendezvous& r, std::int64_t exitCode, const std::string& report,
               const std::string& exceptNode);
  void dropJoiner(Rendezvous& r, const std::string& nodeId);
  // Drops the waiting JOINs `which` selects; returns whom to answer.
  std::vector<std::pair<Peer*, std::uint32_t>> dropJoinersIf(
      Rendezvous& r, const std::function<bool(const Node&)>& which);
  // Leaves a host out for its cooldown (the policy's exclusion); tells every node.
  void exclude(Rendezvous& r, const policy::Exclusion& exclusion);
  void pushToAll(Rendezvous& r, const protocol::Event& event);
  // A node lost (its connection) or gone (a LEAVE with a failure's code):
  // named to the others as lost for `reason`; its round ends, or the job
  // fails when a fixed set of nodes can no longer reach the minimum.
  void nodeGone(Rendezvous& r, const std::string& nodeId, const std::string& reason);
  static void push(const std::vector<Peer*>& peers, const protocol::Event& event);

  void markFinishedIfEmpty(Rendezvous& r);
  // The rendezvous of a LEAVE or REPORT_FAILURE, when `peer`'s connection
  // joined it as `report.nodeId`; else nullptr with `status` and `message`.
  Rendezvous* reportedBy(Peer& peer, const protocol::NodeReport& report, protocol::Status& status,
                         std::string& message);

  boost::asio::any_io_executor executor_;
  StoreState& state_;
  std::unordered_map<std::string, std::unique_ptr<Rendezvous>> rendezvous_;
  // Which (rendezvous, node) each peer speaks for.
  std::unordered_map<Peer*, std::set<std::pair<std::string, std::string>>> byPeer_;
};

}  // namespace ddprun::rendezvous
