#include "tcp_store_driver.h"

#include "tcp_store.h"

namespace ddprun::bench {

TcpStoreDriver::TcpStoreDriver(std::filesystem::path benchPath)
    : benchPath_(std::move(benchPath)) {}

std::string TcpStoreDriver::description() const {
  return "c10d::TCPStore -> c10d::TCPStore server";
}

void TcpStoreDriver::startServer() {
  ServerCommand command;
  command.name = "the c10d::TCPStore server";
  command.argv = {benchPath_.string(), "c10d-server"};
  server_.start(command);
}

std::unique_ptr<BenchClient> TcpStoreDriver::connect(int /*index*/) {
  return connectTcpStore(server_.host(), server_.port());
}

}  // namespace ddprun::bench
