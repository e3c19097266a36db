// TcpStoreDriver: the reference row, LibTorch's c10d::TCPStore client
// against c10d::TCPStore's own server.
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
  // `benchPath` is this executable (for the c10d-server subcommand).
  explicit TcpStoreDriver(std::filesystem::path benchPath);

  std::string id() const override { return "reference"; }
  std::string description() const override;
  bool isReference() const override { return true; }
  void startServer() override;
  std::unique_ptr<BenchClient> connect(int index) override;
  void stopServer() override { server_.stop(); }

 private:
  std::filesystem::path benchPath_;
  ServerProcess server_;
};

}  // namespace ddprun::bench
