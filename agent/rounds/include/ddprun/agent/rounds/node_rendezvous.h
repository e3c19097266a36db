// NodeRendezvous: this node's side of a multi-node job.
//
// With ddprun's store it hosts the store when this node should (static:
// node rank 0; dynamic: is_host=1, or the endpoint is an address of this
// machine and the port is free) and connects to it with the shared token;
// with etcd it takes a lease there (rendezvous/etcd). Then, either way:
//   - joins rounds (JOIN blocks in a helper thread; the result is posted to
//     the agent's io_context),
//   - sends a heartbeat every keep_alive_interval from another thread,
//   - waits for pushed events (round ended, job failed) in a third thread,
//     posting each to the agent's io_context,
//   - reports failures and leaves (one round trip each, in the joining
//     thread, the answer posted to the loop).
// The agent stays single-threaded: every result comes back as a handler
// on its loop.
//
// Thread-safety: construct, call and destroy from the agent's loop thread.
// Ownership: owns the hosted server (if any), the client and its threads;
// the destructor stops and joins them.
#pragma once

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/rendezvous_backend.h"
#include "ddprun/rendezvous/store_server.h"

namespace ddprun::agent {

// "::" (IPv6, and IPv4 too) when the address the job is configured with
// (--local_addr, the store's endpoint, etcd's first member) is an IPv6 one,
// else "0.0.0.0": where a store that every node's workers reach listens.
std::string anyAddressOfTheJobsFamily(const RendezvousConfig& r);

class NodeRendezvous {
 public:
  using EventFn = std::function<void(const rendezvous::protocol::Event&)>;
  using LostFn = std::function<void(const std::string& reason)>;

  // Hosts the store if this node should. Throws ddprun::Error, or
  // ConfigError when node 0's static port (or is_host's) is taken. Connecting
  // happens with the first join, off the agent's thread.
  NodeRendezvous(boost::asio::io_context& io, const AgentConfig& config);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  // Starts the heartbeat and event threads.
  void start(EventFn onEvent, LostFn onLost);
  // The MASTER_PORT this node offers for the next round's workers (used if
  // it becomes group rank 0). Default: a free port found at construction,
  // for worker rank 0's own TCPStore.
  void setMasterPort(std::uint16_t port) { masterPort_ = port; }
  // Join, report and leave run one at a time on a helper thread; each
  // answer is posted to the agent's loop (never called inside the call).
  void asyncJoin(std::function<void(JoinResult)> done);
  void asyncReportFailure(std::int64_t round, int exitCode, const std::string& report,
                          std::chrono::system_clock::time_point failedAt,
                          std::function<void(FailureAnswer)> done);
  // A lost store is not asked: `done` comes at once.
  void asyncLeave(std::int64_t round, std::function<void()> done);
  // Host only: calls `done` once every node has left or the close timeout
  // passed, whichever comes first.
  void asyncWaitUntilAllLeft(std::function<void()> done);

  bool hosting() const { return server_ != nullptr; }
  const std::string& nodeId() const { return nodeId_; }
  // The address the other nodes reach this node at: --local_addr, else
  // where its connection to the rendezvous leaves from ("" before).
  std::string address();
  // "host:port" of the job's store (etcd: "h1:p1,h2:p2"), for messages.
  const std::string& endpoint() const { return endpoint_; }
  // "the rendezvous store at h:p" or "etcd at h1:p1,...", for messages.
  std::string where() const;

 private:
  bool tryToHost(std::string& why);
  void connect();
  std::unique_ptr<rendezvous::RendezvousBackend> connectStore();
  void runHeartbeats();
  // Under mutex_: the store is lost (`reason`); tells the agent, once.
  void reportLost(const std::string& reason);
  void runEvents();
  void joinThread(std::thread& thread);

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const RendezvousConfig& rdzv_;
  std::string nodeId_;
  std::string endpoint_;
  std::uint16_t masterPort_ = 0;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::RendezvousBackend> client_;
  EventFn onEvent_;
  LostFn onLost_;
  std::thread heartbeat_;
  std::thread events_;
  std::thread joiner_;
  std::thread closer_;
  std::mutex mutex_;
  std::condition_variable stopRequested_;
  bool stopping_ = false;
  std::atomic<bool> lost_{false};
  std::atomic<bool> cancelled_{false};
};

}  // namespace ddprun::agent
