#include "ddprun_driver.h"

#include <chrono>
#include <string>

#include "ddprun/common/env.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/store_client.h"

namespace ddprun::bench {

namespace {

using rendezvous::StoreClient;
using rendezvous::StoreClientOptions;

// A missing key is a bug in the benchmark, not something to wait out.
constexpr std::chrono::seconds kGetTimeout{30};

class DdprunClient : public BenchClient {
 public:
  explicit DdprunClient(StoreClientOptions options) : client_(std::move(options)) {}

  void set(const std::string& key, const std::string& value) override { client_.set(key, value); }
  std::size_t get(const std::string& key) override { return client_.get(key, kGetTimeout).size(); }

 private:
  StoreClient client_;
};

}  // namespace

ServerCommand rendezvousCommand(const std::filesystem::path& daemonPath, const std::string& token) {
  ServerCommand command;
  command.name = "ddprun-rendezvous";
  // The c10d::TCPStore row's clients carry no token: this host is trusted,
  // as an agent's own store trusts 127.0.0.1 (docs/security.md).
  command.argv = {daemonPath.string(), "--host",   "127.0.0.1", "--port", "0",
                  "--trusted-address", "127.0.0.1"};
  command.env = {{env::kToken, token}, {env::kLogLevel, "warn"}};
  return command;
}

DdprunDriver::DdprunDriver(std::filesystem::path daemonPath) : daemonPath_(std::move(daemonPath)) {}

std::string DdprunDriver::description() const { return "ddprun StoreClient -> ddprun-rendezvous"; }

void DdprunDriver::startServer() {
  token_ = randomToken();
  server_.start(rendezvousCommand(daemonPath_, token_));
}

std::unique_ptr<BenchClient> DdprunDriver::connect(int index) {
  StoreClientOptions options;
  options.host = server_.host();
  options.port = server_.port();
  options.token = token_;
  options.connectTimeout = std::chrono::seconds(30);
  options.requestTimeout = std::chrono::seconds(30);
  options.name = "bench-client-" + std::to_string(index);
  return std::make_unique<DdprunClient>(std::move(options));
}

}  // namespace ddprun::bench
