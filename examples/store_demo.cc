// store_demo: a small program that uses the ddprun store through its client.
//
//   DDPRUN_TOKEN=secret store_demo HOST PORT [WORKERS]
//
// WORKERS threads each connect, count themselves in with ADD, publish a
// value, meet at a barrier and read every other worker's value.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/store_client.h"

using namespace std::chrono_literals;
using ddprun::rendezvous::StoreClient;
using ddprun::rendezvous::StoreClientOptions;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: DDPRUN_TOKEN=... store_demo HOST PORT [WORKERS]\n";
    return 2;
  }
  StoreClientOptions options;
  options.host = argv[1];
  options.port = static_cast<std::uint16_t>(std::atoi(argv[2]));
  options.token = ddprun::tokenFromEnv(ddprun::env::kToken).value_or("");
  options.connectTimeout = 10s;
  const int workers = argc > 3 ? std::atoi(argv[3]) : 4;
  try {
    std::vector<std::thread> threads;
    std::vector<std::string> reports(workers);
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          StoreClientOptions mine = options;
          mine.name = "demo-worker-" + std::to_string(w);
          StoreClient client(mine);
          const auto arrival = client.add("demo/count", 1);
          client.set("demo/value/" + std::to_string(w), "hello from worker " + std::to_string(w));
          ddprun::rendezvous::barrier(client, "demo/barrier", workers, 10s);
          const auto next = client.get("demo/value/" + std::to_string((w + 1) % workers), 10s);
          reports[w] = "worker " + std::to_string(w) + " arrived " + std::to_string(arrival) +
                       ", read \"" + next + "\"";
        } catch (const ddprun::Error& e) {
          reports[w] = "worker " + std::to_string(w) + " failed: " + e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& line : reports) std::cout << line << "\n";
    StoreClient client(options);
    std::cout << "the store holds " << client.numKeys() << " keys\n";
  } catch (const ddprun::Error& e) {
    std::cerr << "store_demo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
