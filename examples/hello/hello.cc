// hello: the smallest ddprun worker.
//
//   ddprun --nproc_per_node=2 build/bin/hello
//
// Each worker prints what the launcher told it, reaches the agent's store
// with the native client (DDPRUN_STORE_HOST/PORT, DDPRUN_TOKEN), publishes
// its hostname, meets the others at a barrier, reads its neighbour's entry
// and exits 0.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store_client.h"

namespace {

std::string getEnv(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

int main() {
  using namespace std::chrono_literals;
  namespace env = ddprun::env;
  const int rank = std::atoi(getEnv(env::kRank).c_str());
  const int worldSize = std::atoi(getEnv(env::kWorldSize).c_str());
  std::cout << "hello from rank " << rank << " of " << worldSize << " (local rank "
            << getEnv(env::kLocalRank) << ", restart " << getEnv(env::kRestartCount)
            << ", MASTER_ADDR=" << getEnv(env::kMasterAddr)
            << ", MASTER_PORT=" << getEnv(env::kMasterPort) << ")" << std::endl;
  if (getEnv(env::kStorePort).empty()) {
    std::cerr << "hello: not started by ddprun (DDPRUN_STORE_PORT is unset)\n";
    return 2;
  }
  try {
    ddprun::rendezvous::StoreClientOptions options;
    options.host = getEnv(env::kStoreHost);
    options.port = static_cast<std::uint16_t>(std::atoi(getEnv(env::kStorePort).c_str()));
    options.token = getEnv(env::kToken);
    options.name = "hello-rank-" + std::to_string(rank);
    ddprun::rendezvous::StoreClient client(options);
    ddprun::rendezvous::PrefixStore store(client, getEnv(env::kStorePrefix));
    store.set("host/" + std::to_string(rank), getEnv(env::kHostname));
    ddprun::rendezvous::barrier(store, "hello", worldSize, 60s);
    const std::string neighbour = std::to_string((rank + 1) % worldSize);
    std::cout << "rank " << rank << " sees rank " << neighbour << " on "
              << store.get("host/" + neighbour, 10s) << std::endl;
  } catch (const ddprun::Error& e) {
    std::cerr << "hello: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
