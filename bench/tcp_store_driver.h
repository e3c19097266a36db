// TcpStoreDriver: LibTorch's c10d::TCPStore client against either
// c10d::TCPStore's own server (the reference row) or ddprun-rendezvous, which
// serves the TCPStore dialect on its port (same client, two servers).
//
// The server runs in a separate process, like ddprun-rendezvous: the bench
// re-executes itself as `ddprun-bench c10d-server`, which prints
// "listening on 127.0.0.1:PORT" once the c10d server is up.
//
// Thread-safety: as StoreDriver.
#pragma once

#include <filesystem>

#include "server_process.h"
#include "store_driver.h"

namespace ddprun::bench {

class TcpStoreDriver : public StoreDriver {
 public:
  // The reference: `benchPath` is this executable (c10d-server subcommand).
  explicit TcpStoreDriver(std::filesystem::path benchPath);
  // The same client against ddprun-rendezvous at `daemonPath`.
  static std::unique_ptr<TcpStoreDriver> againstDaemon(std::filesystem::path daemonPath);

  std::string id() const override { return daemon_ ? "c10d-client-ddprun-server" : "reference"; }
  std::string description() const override;
  bool isReference() const override { return !daemon_; }
  void startServer() override;
  std::unique_ptr<BenchClient> connect(int index) override;
  void stopServer() override { server_.stop(); }

 private:
  std::filesystem::path benchPath_;
  bool daemon_ = false;
  ServerProcess server_;
};

}  // namespace ddprun::bench
