// StoreServer: the ddprun key-value store served over TCP.
//
// One io_context on one thread runs C++20 coroutines: a listener and one
// coroutine per connection. The store data (StoreState) is touched only from
// that thread, so it needs no locks. Clients authenticate with a shared
// token in their HELLO; see docs/protocol.md. With no token configured the
// store is open (every HELLO is accepted), as PyTorch's TCPStore is: the
// caller says so to the user.
//
// Example:
//   StoreServerOptions options;
//   options.token = ddprun::randomToken();
//   StoreServer server(options);          // binds now; port 0 picks a port
//   server.start();                       // serves on a background thread
//   std::uint16_t port = server.port();
//   ...
//   server.stop();                        // or let the destructor do it
//
// Thread-safety: port(), stats(), start() and stop() may be called from any
// thread; stop() is idempotent and the destructor calls it.
// Ownership: the server owns its io_context, sockets, state and thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // address to bind ("0.0.0.0" for all)
  std::uint16_t port = 0;          // 0: the OS picks a free port
  std::string token;               // empty: open store; never logged
  std::string name = "ddprun-rendezvous";
  // Refuse PyTorch TCPStore clients (they cannot carry the token). When
  // false (the default) they are served on the same port, unauthenticated.
  bool strict = false;
  // Log start and stop at debug level instead of info (an agent's private
  // store is an implementation detail; the daemon's is not).
  bool quiet = false;
  protocol::Limits limits;
  // Keys, values (plus a fixed overhead per key) and waiters held.
  std::size_t maxTotalBytes = std::size_t{4} << 30;
  // Everything the connections together may buffer beyond the stored data:
  // input, requests being received, queued replies, pending waits. A reply
  // that would pass it is refused (an error, or a closed TCPStore
  // connection) instead of built.
  std::size_t maxBufferedBytes = std::size_t{512} << 20;
  std::size_t maxConnections = 65536;
  std::size_t maxConnectionsPerAddress = 4096;
  // Connections that have not proven themselves yet (no valid handshake or
  // first request); beyond this the oldest of them is closed.
  std::size_t maxUnproven = 1024;
  // A connection must prove itself within this time: a native client by
  // authenticating, a TCPStore client by a valid first request. A silent
  // connection (PyTorch 1.13's callback socket) may stay open only when the
  // store is open (no token) or it comes from a trusted address or one from
  // which an authenticated client is connected.
  std::chrono::milliseconds handshakeTimeout{std::chrono::seconds(10)};
  std::vector<std::string> trustedAddresses;
  // The longest any wait lasts (GET/WAIT/MULTI_GET of both dialects); a
  // native wait then times out, a TCPStore connection is closed.
  std::chrono::milliseconds maxWaitTime{std::chrono::hours(2)};
  // An authenticated connection with no traffic and no pending request for
  // this long is told goodbye and closed (the client reconnects on its next
  // call). Zero disables the limit.
  std::chrono::milliseconds idleTimeout{std::chrono::hours(1)};
  // TCP keepalive probing detects peers that vanished without closing.
  std::chrono::seconds keepAliveIdle{30};
  // Prometheus text format at http://metricsHost:metricsPort/metrics
  // (docs/operations.md). -1: none; 0: any free port (metricsPort()).
  // metricsHost empty: `host`.
  int metricsPort = -1;
  std::string metricsHost;
  std::chrono::seconds keepAliveInterval{10};
  int keepAliveCount = 3;
};

struct StoreServerStats {
  std::uint64_t accepted = 0;  // connections accepted
  std::uint64_t rejected = 0;  // connections refused at the handshake
  std::uint64_t active = 0;    // connections open now
  std::uint64_t requests = 0;  // requests handled
  std::uint64_t waiters = 0;   // blocking requests pending now
};

class StoreServer {
 public:
  // Binds and listens at once (so port() is valid and no other process can
  // take the port). Throws NetworkError if the address cannot be bound and
  // ConfigError if strict and the token is empty.
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;
  // The metrics endpoint's port; 0 when there is none.
  std::uint16_t metricsPort() const;

  // Serves on a background thread until stop().
  void start();
  // Serves on the calling thread until stop() is called from another thread.
  void run();
  // Closes the listener and every connection, then ends the loop. Waiting
  // clients see their connection close. Idempotent.
  void stop();

  StoreServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
