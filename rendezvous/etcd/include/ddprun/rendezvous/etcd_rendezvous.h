// EtcdRendezvous: rendezvous rounds kept in etcd (--rdzv_backend=etcd), so
// the job outlives any node: no node hosts the rounds, each computes them
// from the same state (docs/multinode.md, "etcd").
//
// The node holds a lease (renewed by keepAlive()); its alive and joining
// keys sit on it, so a node that dies is gone from etcd after the lease's
// TTL. One watch on the rendezvous's prefix keeps this node's view current
// and pushes: a round that ends or a job that fails becomes an event
// (waitEvent()), a participant whose lease expired ends the running round,
// and a waiting JOIN re-evaluates. State changes are compare-and-swaps on
// one key, so racing nodes agree: one succeeds, the others see its result.
//
// Thread-safety: every call may run on any thread at once.
// Ownership: owns its etcd client, the watch and its thread; the
// destructor revokes the lease (this node leaves at once, not after the
// TTL) and joins the thread.
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

#include "ddprun/rendezvous/etcd_client.h"
#include "ddprun/rendezvous/rendezvous_backend.h"

namespace ddprun::rendezvous {

namespace etcd {
struct View;
struct RoundState;
}  // namespace etcd

struct EtcdRendezvousOptions {
  EtcdOptions etcd;
  std::string rdzvId;
  std::string nodeId;
  // The lease's TTL: a node silent this long is lost (keep_alive_interval x
  // keep_alive_max_attempt, in whole seconds, at least 1).
  std::chrono::seconds leaseTtl{15};
  // How long connect() keeps trying to reach etcd.
  std::chrono::milliseconds connectTimeout{std::chrono::seconds(60)};
};

// What one node asked of etcd and heard from it (benchmarks, tests).
struct EtcdRendezvousStats {
  std::uint64_t requests = 0;     // gateway requests (each try on a member counts)
  std::uint64_t watchEvents = 0;  // events its watches delivered
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
  // endpoints then, NetworkError after shutdown()), takes the lease and
  // starts the watch. The first join() calls it; once done it returns.
  void connect();

  protocol::Assignment join(const protocol::JoinRequest& request,
                            std::chrono::milliseconds timeout) override;
  void leave(const protocol::NodeReport& report) override;
  protocol::RestartDecision reportFailure(const protocol::NodeReport& report) override;
  protocol::RendezvousStatus status(const std::string& rdzvId, bool details = false) override;
  std::optional<protocol::Event> waitEvent(std::chrono::milliseconds timeout) override;
  void keepAlive() override;
  void shutdown() override;
  EtcdRendezvousStats stats() const;

 private:
  void runWatch();
  // Reads everything under the rendezvous's prefix and watches from there.
  void loadView();
  // A copy of this node's view.
  etcd::View snapshot();
  // With mutex_ held: turns a change of the state into this node's events.
  void onStateChange(const std::optional<etcd::RoundState>& before,
                     const std::optional<etcd::RoundState>& after);
  // A participant's lease expired: the running round ends.
  void onNodeLost(const std::string& nodeId);
  // Compare-and-swap of the state from `view`'s revision to `next`; false
  // when another node changed it first. With awaitWatch, returns once the
  // view has that change (never on the watch's own thread).
  bool swap(const etcd::View& view, const etcd::RoundState& next,
            const std::string& alsoDeletePrefix = "", bool awaitWatch = true);
  // Until the view changes, the stop, or `until`.
  void waitForChange(std::int64_t stateSeen, std::int64_t revision,
                     std::chrono::steady_clock::time_point until);
  // "<prefix>/<rdzv_id>/": where a rendezvous's keys live.
  std::string base(const std::string& rdzvId) const;
  std::string base() const { return base(options_.rdzvId); }

  EtcdRendezvousOptions options_;
  EtcdClient client_;
  std::int64_t lease_ = 0;                             // set by connect() under mutex_
  std::atomic<bool> started_{false};                   // connect() is done: the watch runs
  std::chrono::steady_clock::time_point lastRenewed_;  // of the lease (keepAlive's thread)
  std::int64_t firstSeen_ = 0;                         // this node's alive key's create revision
  std::unique_ptr<EtcdWatch> watch_;
  std::atomic<std::uint64_t> watchEvents_{0};  // of every watch this node opened
  std::thread watcher_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<etcd::View> view_;
  std::deque<protocol::Event> events_;
  std::set<std::int64_t> ownEndedRounds_;  // ended by this node's own report
  std::int64_t lastRound_ = 0;             // the last round this node was given
  // A round this node takes part in that its JOIN has not returned yet.
  std::optional<protocol::Assignment> assigned_;
  bool left_ = false;
  bool stopping_ = false;
  std::string watchError_;  // set when the watch failed for good
};

}  // namespace ddprun::rendezvous
