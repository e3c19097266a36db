// AttemptStore: every attempt's workers start on a store no earlier worker
// has written to; a fixed port is bound again for each.
#include "ddprun/agent/rounds/attempt_store.h"

#include <gtest/gtest.h>

#include "ddprun/rendezvous/store_client.h"
#include "unused_port.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;

std::int64_t keysOn(std::uint16_t port) {
  rendezvous::StoreClientOptions options;
  options.port = port;
  options.token = "t";
  options.connectTimeout = 5s;
  rendezvous::StoreClient client(options);
  return client.numKeys();
}

void setKey(std::uint16_t port) {
  rendezvous::StoreClientOptions options;
  options.port = port;
  options.token = "t";
  rendezvous::StoreClient client(options);
  client.set("rank_0", "address of a worker that is gone");
}

rendezvous::StoreServerOptions optionsOn(std::uint16_t port) {
  rendezvous::StoreServerOptions options;
  options.port = port;
  options.token = "t";
  options.quiet = true;
  return options;
}

TEST(AttemptStore, AnUnusedStoreIsKeptAndAUsedOneReplaced) {
  AttemptStore store(optionsOn(0));
  EXPECT_EQ(store.port(), 0);
  const std::uint16_t first = store.fresh();
  EXPECT_EQ(store.fresh(), first);  // never given to workers: still fresh
  store.markUsed();
  setKey(first);
  EXPECT_EQ(keysOn(first), 1);
  const std::uint16_t second = store.fresh();
  EXPECT_EQ(store.port(), second);
  EXPECT_EQ(keysOn(second), 0);
}

TEST(AttemptStore, AFixedPortIsBoundAgainForEachAttempt) {
  const std::uint16_t port = harness::freePort();
  AttemptStore store(optionsOn(port));
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_EQ(store.fresh(), port);
    store.markUsed();
    EXPECT_EQ(keysOn(port), 0) << "attempt " << attempt;
    setKey(port);
  }
}

}  // namespace
}  // namespace ddprun::agent
