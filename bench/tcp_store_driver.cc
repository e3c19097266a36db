#include "tcp_store_driver.h"

#include "ddprun_driver.h"
#include "tcp_store.h"

namespace ddprun::bench {

TcpStoreDriver::TcpStoreDriver(std::filesystem::path benchPath)
    : benchPath_(std::move(benchPath)) {}

std::unique_ptr<TcpStoreDriver> TcpStoreDriver::againstDaemon(std::filesystem::path daemonPath) {
  auto driver = std::make_unique<TcpStoreDriver>(std::move(daemonPath));
  driver->daemon_ = true;
  return driver;
}

std::string TcpStoreDriver::description() const {
  return daemon_ ? "c10d::TCPStore -> ddprun-rendezvous"
                 : "c10d::TCPStore -> c10d::TCPStore server";
}

void TcpStoreDriver::startServer() {
  if (daemon_) {
    // The TCPStore dialect carries no token; the daemon still needs one.
    server_.start(rendezvousCommand(benchPath_, "bench-token"));
    return;
  }
  ServerCommand command;
  command.name = "the c10d::TCPStore server";
  command.argv = {benchPath_.string(), "c10d-server"};
  server_.start(command);
}

std::unique_ptr<BenchClient> TcpStoreDriver::connect(int /*index*/) {
  return connectTcpStore(server_.host(), server_.port());
}

}  // namespace ddprun::bench
