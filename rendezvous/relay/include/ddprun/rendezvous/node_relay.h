// NodeRelay: the node's one door to the job's store. Its workers connect
// here (PyTorch's TCPStore dialects, 1.13 and 2.x); the relay answers the
// handshake and PING itself and carries everything else to the job's store
// over one authenticated, multiplexed native connection (docs/architecture.md,
// "The node relay"):
//   - identical reads in flight at the same time (GET of a key, WAIT on the
//     same keys) become one upstream request whose answer goes to every
//     caller; a read joins one in flight only if that one was sent after
//     the caller's own last write, so every caller still reads its writes;
//   - concurrent ADDs of one key wait for the one in flight and then go
//     up as one ADD; each caller gets the sum it would have seen alone, in
//     arrival order (a combined ADD the store refuses is retried one by one);
//   - a WAIT that a queue push ended wakes only the oldest caller, as the
//     store does, and a WAIT on a queue is never shared again;
//   - everything else goes up as it came: per-connection order, the
//     store's refusals (a TCPStore client is closed, as the store closes
//     it), a caller that hangs up or cancels drops its wait upstream.
// One worker cannot starve the others: a connection whose writes the store
// has not acknowledged beyond `maxUnackedBytes` is not read until they are.
// The upstream lost is every worker connection closed and `onUpstreamLost`
// (the agent: the store is lost).
//
// Thread-safety: NodeRelay: every call on the io_context's thread, except
// the constructor. RelayThread runs one on its own thread; its calls may
// come from any thread.
// Ownership: the relay owns its listener, its upstream and its connections.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous {

// What the relay did (ddprun status, the store's metrics, the benchmark).
struct RelayCounters {
  std::uint64_t connectionsAccepted = 0;
  std::uint64_t connectionsOpen = 0;
  std::uint64_t requests = 0;          // from the workers
  std::uint64_t waiting = 0;           // workers in a WAIT or BARRIER now
  std::uint64_t answeredLocally = 0;   // VALIDATE, PING, CANCEL_WAIT
  std::uint64_t upstreamRequests = 0;  // sent to the store
  std::uint64_t coalesced = 0;         // reads answered by another's upstream request
  std::uint64_t addsCombined = 0;      // ADDs that rode in another's upstream ADD
  std::uint64_t bytesSaved = 0;        // reply bytes the store did not send
};

// What the agent publishes of them: the node telemetry's relay counters
// (ddprun/common/node_telemetry.h).
std::string countersText(const RelayCounters& counters);

struct RelayOptions {
  std::string upstreamHost;  // the job's store
  std::uint16_t upstreamPort = 0;
  std::string token;       // the agents' token; empty: an open store
  std::string sourceHost;  // the upstream's local address (the node's); empty: any
  std::string listenHost = "127.0.0.1";
  std::uint16_t listenPort = 0;  // 0: a free port
  std::string name = "relay";    // in the store's logs
  rendezvous::protocol::Limits limits;
  std::size_t maxUnackedBytes = 4 * 1024 * 1024;  // per worker connection
  int listenBacklog = 4096;                       // the kernel caps it at net.core.somaxconn
  // How long the upstream connect keeps retrying a refused connection.
  std::chrono::milliseconds connectTimeout{30000};
  // The first connect waits a random time in [0, this): relays that start
  // together (a round's every node) meet the store's listen backlog spread
  // out (relayConnectSpread()).
  std::chrono::microseconds connectSpread{0};
  // How long the first ADD of a key through this relay waits for the
  // node's other workers' ADDs of it to go up as one (zero: at once; later
  // ADDs join one in flight either way). 2 ms: init_process_group's two
  // ADDs cost 4 ms more, and a node's 8 ranks send the store 6.8 requests
  // instead of 11.6 (docs/benchmarks.md, "Fan-in through node relays").
  std::chrono::microseconds addWindow{2000};
  // Every this long (0: never), and once more when it stops, the relay
  // hands its counters to `onReport` (on its loop thread).
  std::chrono::milliseconds reportEvery{0};
  std::function<void(const RelayCounters&)> onReport;
};

// The connect spread for a round of `nodes` relays: 100 us a node (12,288
// relays: 1.2 s), so they arrive at about 10,000 a second, which a store
// behind the kernel's default listen backlog (somaxconn 4096) takes without
// an overflow (docs/benchmarks.md, "Fan-in through node relays"); 2 nodes
// wait at most 0.2 ms.
std::chrono::microseconds relayConnectSpread(std::uint32_t nodes);

class NodeRelay {
 public:
  // Binds the listener now (a clear error when it cannot).
  NodeRelay(boost::asio::io_context& io, RelayOptions options,
            std::function<void(const std::string& reason)> onUpstreamLost = {});
  ~NodeRelay();
  NodeRelay(const NodeRelay&) = delete;
  NodeRelay& operator=(const NodeRelay&) = delete;

  // Connects upstream and starts accepting; requests wait for the
  // upstream. `onReady` runs once the store has accepted the relay.
  void start(std::function<void()> onReady = {});
  // Closes the listener, the connections and the upstream. Idempotent.
  void stop();
  std::uint16_t port() const;
  const RelayCounters& counters() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

// A NodeRelay on a loop thread of its own (the agent's).
class RelayThread {
 public:
  // Binds now; connects upstream and serves once the thread runs.
  RelayThread(RelayOptions options, std::function<void(const std::string& reason)> onUpstreamLost);
  ~RelayThread();
  RelayThread(const RelayThread&) = delete;
  RelayThread& operator=(const RelayThread&) = delete;

  std::uint16_t port() const { return port_; }
  // A copy taken on the loop thread.
  RelayCounters counters();
  // Stops the relay and joins the thread. Idempotent.
  void stop();

 private:
  boost::asio::io_context io_;
  std::unique_ptr<NodeRelay> relay_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace ddprun::rendezvous
