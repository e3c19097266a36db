// StoreDriver: one (client, server) pair that the store benchmark measures,
// and BenchClient, one client connection of that pair.
//
// Each row of the benchmark is one driver: ddprun's StoreClient against the
// ddprun-rendezvous daemon, c10d::TCPStore against its own server, and later
// c10d::TCPStore against ddprun-rendezvous. A driver starts a fresh server in
// a separate process for every run, hands out client connections, and stops
// the server again, so no two runs share state.
//
// Thread-safety: startServer() and stopServer() are called from the
// benchmark's main thread; connect() from many client threads at once while
// the server runs. A BenchClient is used by the one thread that made it.
// Errors: ddprun::Error or std::exception; the benchmark records the message.
#pragma once

#include <memory>
#include <string>

namespace ddprun::bench {

class BenchClient {
 public:
  virtual ~BenchClient() = default;
  // One set round trip (as the client library defines it).
  virtual void set(const std::string& key, const std::string& value) = 0;
  // One get; returns the size of the value read, so callers can check it.
  virtual std::size_t get(const std::string& key) = 0;
};

class StoreDriver {
 public:
  virtual ~StoreDriver() = default;

  // Short stable name for machine-readable output ("ddprun", "reference").
  virtual std::string id() const = 0;
  // "client -> server", for the table.
  virtual std::string description() const = 0;
  // True for the system every other row is compared with.
  virtual bool isReference() const = 0;

  // Starts a fresh server process and waits until it listens.
  virtual void startServer() = 0;
  // Opens client connection number `index` to the running server.
  virtual std::unique_ptr<BenchClient> connect(int index) = 0;
  // Stops the server process and reaps it. Idempotent.
  virtual void stopServer() = 0;
};

}  // namespace ddprun::bench
