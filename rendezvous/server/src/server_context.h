// What every session of one StoreServer shares: options, the store state,
// the set of open sessions and counters. Lives on the server's loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_set>

#include "ddprun/rendezvous/store_server.h"
#include "ddprun/rendezvous/store_state.h"
#include "rendezvous_manager.h"

namespace ddprun::rendezvous {

class Session;

struct ServerCounters {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> active{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> waiters{0};
};

struct ServerContext {
  explicit ServerContext(StoreServerOptions opts)
      : options(std::move(opts)),
        state(StoreLimits{options.maxTotalBytes, options.limits.maxValueBytes}) {}

  const StoreServerOptions options;
  StoreState state;
  std::unordered_set<Session*> sessions;
  ServerCounters counters;
  // Owned by the server; null once it is being destroyed.
  RendezvousManager* rendezvous = nullptr;

  // Publishes the waiter count for stats() readers on other threads.
  void syncWaiters() { counters.waiters = state.numWaiters(); }
};

}  // namespace ddprun::rendezvous
