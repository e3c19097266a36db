// EtcdRendezvous: rendezvous rounds kept in etcd (--rdzv_backend=etcd), so
// the job outlives any node: no node hosts the rounds (docs/multinode.md,
// "etcd"; docs/architecture.md for the keys and the coordinator).
//
// The node holds a lease (renewed by keepAlive(), with the job's lease);
// its alive and joining keys sit on it, so a node that dies is gone from
// etcd after the lease's TTL. It watches one key, the rendezvous's small
// state: a round that starts (the node then reads its own assign key), ends
// or fails, or a host excluded or readmitted, becomes a JOIN's answer or an
// event (waitEvent()). Rounds are formed by one coordinator, the node with
// the oldest alive key: each node watches the alive key created just before
// its own (etcd's election recipe) and takes over when it is gone, so a
// coordinator's death wakes one node. A failure report is a compare-and-swap
// of the state. So a round of N nodes costs O(N) requests, events and bytes.
//
// Thread-safety: every call may run on any thread at once.
// Ownership: owns its etcd client, its watches, their threads and (while
// it coordinates) the coordinator; the destructor revokes the lease (this
// node leaves at once, not after the TTL) and joins the threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/etcd_client.h"
#include "ddprun/rendezvous/rendezvous_backend.h"

namespace ddprun::rendezvous {

namespace etcd {
struct RoundState;
struct NodeInfo;
struct AssignRecord;
class EtcdCoordinator;
}  // namespace etcd

struct EtcdRendezvousOptions {
  EtcdOptions etcd;
  std::string rdzvId;
  std::string nodeId;
  // The lease's TTL: a node silent this long is lost (keep_alive_interval x
  // keep_alive_max_attempt, in whole seconds, at least 1).
  std::chrono::seconds leaseTtl{15};
  // The job lease's TTL (rdzv_conf job_ttl): the job's keys outlive its
  // last node this long, then its id starts afresh. At least 4 x leaseTtl.
  std::chrono::seconds jobTtl{60};
  // How long connect() keeps trying to reach etcd.
  std::chrono::milliseconds connectTimeout{std::chrono::seconds(60)};
};

// What one node asked of etcd and heard from it (benchmarks, tests).
struct EtcdRendezvousStats {
  std::uint64_t requests = 0;     // gateway requests (each try on a member counts)
  std::uint64_t watchEvents = 0;  // events its watches delivered
  bool coordinator = false;       // it coordinated
};

class EtcdRendezvous final : public RendezvousBackend {
 public:
  // Contacts nothing yet. A read-only observer (`ddprun status`) passes an
  // empty nodeId: it never takes a lease or watches.
  explicit EtcdRendezvous(EtcdRendezvousOptions options);
  ~EtcdRendezvous() override;
  EtcdRendezvous(const EtcdRendezvous&) = delete;
  EtcdRendezvous& operator=(const EtcdRendezvous&) = delete;

  // Reaches etcd (retrying until connectTimeout; TimeoutError naming the
  // endpoints then, NetworkError after shutdown()) and takes the lease. The
  // first join() calls it; once done it returns. That first join() then
  // puts the alive and joining keys and reads what to watch in one
  // transaction, and starts the watches.
  void connect();

  protocol::Assignment join(const protocol::JoinRequest& request,
                            std::chrono::milliseconds timeout) override;
  void leave(const protocol::NodeReport& report) override;
  protocol::RestartDecision reportFailure(const protocol::NodeReport& report) override;
  protocol::RendezvousStatus status(const std::string& rdzvId, bool details = false) override;
  std::optional<protocol::Event> waitEvent(std::chrono::milliseconds timeout) override;
  void keepAlive(std::chrono::steady_clock::time_point deadline) override;
  // The rounds live in etcd: no node hosts anything to close.
  void waitUntilAllLeft(const std::string&, std::chrono::milliseconds) override {}
  void publishNodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                           const std::string& nodeId, const std::string& text) override;
  std::vector<std::string> nodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                                        const std::vector<std::string>& nodeIds) override;
  std::string localAddress() override { return client_.localAddress(); }
  void shutdown() override;
  std::optional<std::chrono::seconds> jobExpiresIn(const std::string& rdzvId) override;
  EtcdRendezvousStats stats() const;

 private:
  // The first JOIN: the watch, then one transaction (alive and joining
  // keys, the state, the node before this one), then the coordinator if
  // there is none before this node.
  void registerNode(const etcd::NodeInfo& me);
  // A new watch of the state and this node's assign key, from now (so
  // etcd tells it of each change at once): a read after it misses nothing.
  // The predecessor's alive key is added once known.
  void openWatch();
  void runWatch();
  // After a compaction: reads what the watch missed and watches anew.
  void reload();
  // The node before this one is gone: watch the next older one, or
  // coordinate when there is none.
  void onPredecessorGone();
  void startCoordinator();
  // With mutex_ held: a new state seen (watch or own compare-and-swap).
  void onState(std::optional<etcd::RoundState> state, std::int64_t modRevision);
  // With mutex_ held: the state key as a read returned it (a state this
  // ddprun cannot parse is left alone, as from the watch).
  void onStateRead(const EtcdRange& state);
  // With mutex_ held: this node's assign key's value, as last seen.
  void noteAssign(const std::string& value);
  // With mutex_ held: the JOIN's answer once the state names the round of
  // this node's assign key.
  void takeAssignment();
  // Reads this node's assign key (outside mutex_).
  void readAssignment();
  // Until the state changes, the stop, or `until`.
  void waitForChange(std::int64_t stateRevision, std::chrono::steady_clock::time_point until);
  // status(); `full`: from one read of every key (with who is missing),
  // else from this node's view and one count.
  protocol::RendezvousStatus statusOf(const std::string& rdzvId, bool details, bool full);
  // Claims --node_rank; ServerError when another live node holds it.
  void claimNodeRank(std::int64_t nodeRank);
  // The alive key created last before `createRevision` (none: empty).
  EtcdRange newestAliveBefore(std::int64_t createRevision);
  // Nodes of the job alive since before the state's last change.
  std::int64_t aliveBefore(std::int64_t revision);
  // The error of a node whose lease etcd no longer has.
  NetworkError leaseExpired() const;
  // "<prefix>/<rdzv_id>/": where a rendezvous's keys live.
  std::string base(const std::string& rdzvId) const;
  std::string base() const { return base(options_.rdzvId); }

  EtcdRendezvousOptions options_;
  EtcdClient client_;
  // Lease renewals (keepAlive()) on a connection of their own: under a
  // deadline they must never wait behind another request to a member that
  // went silent.
  EtcdClient renewals_;
  std::int64_t lease_ = 0;               // set by connect() under mutex_
  std::atomic<bool> started_{false};     // connect() is done: the lease is there
  std::atomic<bool> registered_{false};  // the first join() put the alive key: the watches run
  std::int64_t aliveRevision_ = 0;       // this node's alive key's create revision
  // Replaced and cancelled under mutex_; its other calls come from the
  // thread that reads it (registerNode() before watcher_ starts, then
  // watcher_).
  std::unique_ptr<EtcdWatch> watch_;
  std::string predecessorKey_;  // guarded by mutex_; "" while this node coordinates
  std::unique_ptr<etcd::EtcdCoordinator> coordinator_;  // guarded by mutex_
  std::atomic<std::uint64_t> watchEvents_{0};           // of every watch this node opened
  std::atomic<bool> coordinated_{false};
  std::thread watcher_;
  std::thread coordinatorThread_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<etcd::RoundState> state_;       // the newest state seen; null: none
  std::int64_t stateRevision_ = 0;                // its mod revision
  std::optional<protocol::JoinRequest> request_;  // the JOIN in progress
  std::string address_;                           // this node's, as it joined
  std::deque<protocol::Event> events_;
  std::set<std::int64_t> ownEndedRounds_;              // ended by this node's own report
  std::int64_t lastRound_ = 0;                         // the last round this node was given
  std::unique_ptr<etcd::AssignRecord> pendingAssign_;  // this node's assign key, last seen
  // A round this node takes part in that its JOIN has not returned yet.
  std::optional<protocol::Assignment> assigned_;
  bool left_ = false;
  bool stopping_ = false;
};

}  // namespace ddprun::rendezvous
