// NodeRendezvous: this node's side of a multi-node job.
//
// With ddprun's store it hosts the store when this node should (static:
// node rank 0; dynamic: is_host=1, or the endpoint is an address of this
// machine and the port is free) and connects to it with the shared token;
// with etcd it takes a lease there (rendezvous/etcd). Then, either way,
// through the RendezvousBackend interface only:
//   - joins rounds, reports failures, leaves, and (the store's host) waits
//     until every node left: one call at a time, in order, on its one
//     worker thread, each answer posted to the agent's io_context;
//   - sends a heartbeat every keep_alive_interval from another thread,
//     started once connected;
//   - waits for pushed events (round ended, job failed) in a third thread,
//     posting each to the agent's io_context.
// The agent stays single-threaded: every result comes back as a handler
// on its loop.
//
// Thread-safety: construct, call and destroy from the agent's loop thread.
// Ownership: owns the hosted server (if any), the client and its threads;
// the destructor stops and joins them.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/rounds/rounds_settings.h"
#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/rendezvous_backend.h"
#include "ddprun/rendezvous/store_server.h"

namespace ddprun::agent {

// "::" (IPv6, and IPv4 too) when the address the job is configured with
// (--local_addr, the store's endpoint, etcd's first member) is an IPv6 one,
// else "0.0.0.0": where a store that every node's workers reach listens.
std::string anyAddressOfTheJobsFamily(const RendezvousConfig& r);

class NodeRendezvous : public NodeCountersSink {
 public:
  using EventFn = std::function<void(const rendezvous::protocol::Event&)>;
  // "lost <where()> (<why>)".
  using LostFn = std::function<void(const std::string& what)>;

  // Hosts the store if this node should. Throws ddprun::Error, or
  // ConfigError when node 0's static port (or is_host's) is taken. Connecting
  // happens with the first join, off the agent's thread.
  NodeRendezvous(boost::asio::io_context& io, RoundsSettings settings);
  ~NodeRendezvous() override;
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  // Where pushed events and the store's loss are told (on the loop); the
  // heartbeat and event threads start once the first join connected.
  void start(EventFn onEvent, LostFn onLost);
  // The MASTER_PORT this node offers for the next round's workers (used if
  // it becomes group rank 0). Default: a free port found at construction,
  // for worker rank 0's own TCPStore.
  void setMasterPort(std::uint16_t port) { masterPort_ = port; }
  // Join, report, leave and the wait for the others run one at a time, in
  // order, on the worker thread; each answer is posted to the agent's loop
  // (never called inside the call).
  void asyncJoin(std::function<void(JoinResult)> done);
  void asyncReportFailure(const FailureNotice& failure, std::function<void(FailureAnswer)> done);
  // A lost store is not asked: `done` comes at once.
  void asyncLeave(std::int64_t round, int exitCode, std::function<void()> done);
  // Host only: calls `done` once every node has left or the close timeout
  // passed, whichever comes first.
  void asyncWaitUntilAllLeft(std::function<void()> done);
  // Keeps this node's counters (its relay's, its downtime's) where the
  // rendezvous lives (`ddprun status`, the store's metrics), on the worker
  // thread; a failure is logged, never fatal. Any thread.
  void publishNodeCounters(rendezvous::protocol::NodeCounters kind, std::string text);
  // The downtime counters (NodeCountersSink).
  void publishCounters(std::string text) override {
    publishNodeCounters(rendezvous::protocol::NodeCounters::kDowntime, std::move(text));
  }

  bool hosting() const { return server_ != nullptr; }
  const std::string& nodeId() const { return nodeId_; }
  // The address the other nodes reach this node at: --local_addr, else
  // where its connection to the rendezvous leaves from ("" before).
  std::string address();
  // "the rendezvous store at h:p" or "etcd at h1:p1,...", for messages.
  const std::string& where() const { return where_; }
  // The job's ddprun store (it holds each round's keys; the workers' native
  // clients may use it); none with etcd, where the workers' store is group
  // rank 0's.
  struct Endpoint {
    std::string host;
    int port = 0;
  };
  const std::optional<Endpoint>& jobStore() const { return jobStore_; }

 private:
  bool tryToHost(std::string& why);
  void connect();
  std::unique_ptr<rendezvous::RendezvousBackend> connectStore();
  void runHeartbeats();
  // Under mutex_: the store is lost (`reason`); tells the agent, once.
  void reportLost(const std::string& reason);
  void runEvents();
  void joinThread(std::thread& thread);
  // A round that did not form in time, with what to check.
  std::string withJoinAdvice(const std::string& timeout) const;

  boost::asio::io_context& io_;
  const RoundsSettings settings_;
  const RendezvousConfig& rdzv_;
  std::string nodeId_;
  std::string endpoint_;
  std::string where_;
  std::optional<Endpoint> jobStore_;
  std::uint16_t masterPort_ = 0;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::RendezvousBackend> client_;
  EventFn onEvent_;
  LostFn onLost_;
  std::thread heartbeat_;
  std::thread events_;
  std::mutex mutex_;
  std::condition_variable stopRequested_;
  bool stopping_ = false;
  std::atomic<bool> lost_{false};
  std::atomic<bool> cancelled_{false};
  boost::asio::thread_pool worker_{1};  // last: stopped and joined first
};

}  // namespace ddprun::agent
