// EtcdCoordinator: the one node of an etcd rendezvous that forms its rounds
// (docs/architecture.md, "etcd"): the node whose alive key is the oldest,
// normally the first node (the future group rank 0). It reads the
// rendezvous's keys once, then keeps its view current from one watch of
// them, with counts kept as the events come, so a round of N nodes costs it
// O(N) work. It writes: the state (a new rendezvous, a round that
// completes, a running round that ends because a node was lost, joined
// again or asked to join, a node of a fixed set (a Slurm step's) lost,
// which closes the job once fewer than MIN are left, a host excluded or
// readmitted, a failed job's leftover started afresh), the round's record and each node's assign
// key (in transactions of at most 127 operations). Every write is guarded by its own alive key's
// create revision, so a coordinator that was paused past its lease writes nothing once it resumes:
// its successor (the next oldest node, woken by that key's deletion) has taken over.
//
// Thread-safety: run() on one thread; offer() and stop() from any.
// Ownership: owns its watch and the watch's thread; uses the node's
// EtcdClient, which must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/rendezvous/etcd_client.h"
#include "ddprun/rendezvous/messages.h"

namespace ddprun::rendezvous::etcd {

struct CoordinatorView;

struct CoordinatorOptions {
  EtcdOptions etcd;
  std::string rdzvId;
  std::string nodeId;
  std::string base;                // "<prefix>/<rdzv_id>/"
  std::int64_t aliveRevision = 0;  // this node's alive key's create revision: the guard
  std::chrono::seconds jobTtl{60};
  std::atomic<std::uint64_t>* watchEvents = nullptr;  // counts its watch's events (stats)
};

class EtcdCoordinator {
 public:
  EtcdCoordinator(CoordinatorOptions options, EtcdClient& client);
  ~EtcdCoordinator();
  EtcdCoordinator(const EtcdCoordinator&) = delete;
  EtcdCoordinator& operator=(const EtcdCoordinator&) = delete;

  // Coordinates until stop(), or until this node's alive key is gone (its
  // lease expired: another node coordinates now).
  void run();
  void stop();
  // This node's JOIN: the settings of a rendezvous the coordinator creates
  // (or starts afresh after a failed job).
  void offer(const protocol::JoinRequest& request);

 private:
  struct Action;
  void load();
  void runWatch();
  // With mutex_ held: what to write now (if anything), and when to look
  // again without an event.
  Action decide(std::chrono::steady_clock::time_point& wakeAt);
  // Performs `action`; false when this node is no longer the coordinator.
  bool perform(const Action& action);
  bool guardHolds();

  CoordinatorOptions options_;
  EtcdClient& client_;
  std::unique_ptr<EtcdWatch> watch_;
  std::thread watcher_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<CoordinatorView> view_;
  std::optional<protocol::JoinRequest> request_;
  std::int64_t loadedRevision_ = 0;  // of the view's read: the watch's events to that are in it
  std::int64_t awaiting_ = 0;        // a revision this node wrote that the view has not seen
  bool dirty_ = true;
  bool stopping_ = false;
  bool reload_ = false;
};

}  // namespace ddprun::rendezvous::etcd
