// DdprunDriver: ddprun's StoreClient against the real ddprun-rendezvous
// daemon, started as a child process for every run.
//
// The daemon is started with `--host 127.0.0.1 --port 0`, a fresh random
// token in DDPRUN_TOKEN and DDPRUN_LOG_LEVEL=warn; its port comes from its
// "listening on HOST:PORT" line. rendezvousCommand() is shared with any
// other driver that runs a different client against the same daemon.
//
// Thread-safety: as StoreDriver.
#pragma once

#include <filesystem>
#include <string>

#include "server_process.h"
#include "store_driver.h"

namespace ddprun::bench {

// How to start the daemon at `daemonPath` with `token`.
ServerCommand rendezvousCommand(const std::filesystem::path& daemonPath, const std::string& token);

class DdprunDriver : public StoreDriver {
 public:
  explicit DdprunDriver(std::filesystem::path daemonPath);

  std::string id() const override { return "ddprun"; }
  std::string description() const override;
  bool isReference() const override { return false; }
  void startServer() override;
  std::unique_ptr<BenchClient> connect(int index) override;
  void stopServer() override { server_.stop(); }

 private:
  std::filesystem::path daemonPath_;
  std::string token_;
  ServerProcess server_;
};

}  // namespace ddprun::bench
