#include "tcp_store.h"

#include <signal.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <iostream>
#include <vector>

namespace ddprun::bench {

namespace {

constexpr std::chrono::seconds kTimeout{30};

class TcpStoreClient : public BenchClient {
 public:
  TcpStoreClient(const std::string& host, std::uint16_t port) : store_(host, clientOptions(port)) {}

  void set(const std::string& key, const std::string& value) override {
    value_.assign(value.begin(), value.end());  // reuses the buffer: no allocation
    store_.set(key, value_);
  }
  std::size_t get(const std::string& key) override { return store_.get(key).size(); }

 private:
  static c10d::TCPStoreOptions clientOptions(std::uint16_t port) {
    c10d::TCPStoreOptions options;
    options.port = port;
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = kTimeout;
    return options;
  }

  c10d::TCPStore store_;
  std::vector<std::uint8_t> value_;
};

}  // namespace

std::unique_ptr<BenchClient> connectTcpStore(const std::string& host, std::uint16_t port) {
  return std::make_unique<TcpStoreClient>(host, port);
}

int runTcpStoreServer() {
  // Block the stop signals before the store starts its threads, so that they
  // inherit the mask and this thread alone takes the signal.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  try {
    c10d::TCPStoreOptions options;
    options.port = 0;  // the OS picks; getPort() reports it
    options.isServer = true;
    options.waitWorkers = false;
    options.timeout = kTimeout;
    c10d::TCPStore server("127.0.0.1", options);
    std::cout << "listening on 127.0.0.1:" << server.getPort() << std::endl;
    int signal = 0;
    sigwait(&stopSignals, &signal);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddprun-bench c10d-server: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ddprun::bench
