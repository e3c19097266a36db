// What every connection of one StoreServer shares: options, the store state,
// the set of open connections, the budget and counters. Lives on the server's loop thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>

#include "ddprun/common/logging.h"
#include "ddprun/rendezvous/store_server.h"
#include "ddprun/rendezvous/store_state.h"
#include "loop_pauses.h"
#include "rendezvous_manager.h"
#include "resource_budget.h"

namespace ddprun::rendezvous {

class Transport;

struct ServerCounters {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> active{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> waiters{0};
};

// What /metrics reports beyond ServerCounters: plain values, touched only
// on the server's loop thread (where the metrics endpoint runs too).
struct ServerMetrics {
  std::uint64_t nativeConnections = 0;  // open now, by dialect
  std::uint64_t tcpstoreConnections = 0;
  // Requests handled, by dialect and operation name.
  std::map<std::string, std::uint64_t> nativeOperations;
  std::map<std::string, std::uint64_t> tcpstoreOperations;
  std::uint64_t bytesReceived = 0;
  std::uint64_t bytesSent = 0;
};

struct ServerContext {
  explicit ServerContext(StoreServerOptions opts)
      : options(std::move(opts)),
        state(StoreLimits{options.maxTotalBytes, options.limits.maxValueBytes}),
        budget(
            {options.maxBufferedBytes, options.maxConnections, options.maxConnectionsPerAddress}) {}

  const StoreServerOptions options;
  StoreState state;
  ResourceBudget budget;
  // One limiter per kind of line a flood of clients could repeat.
  LogLimiter rejectedLog;
  LogLimiter closedLog;
  std::size_t unproven = 0;  // connections still under the handshake deadline
  // Member addresses: those from which an agent (the full token) has joined
  // a rendezvous and is still connected, with how many such connections.
  std::map<std::string, int> memberAddresses;
  std::unordered_set<Transport*> connections;
  ServerCounters counters;
  ServerMetrics metrics;
  LoopPauses pauses{options.name};
  // Owned by the server; null once it is being destroyed.
  RendezvousManager* rendezvous = nullptr;

  // Publishes the waiter count for stats() readers on other threads.
  void syncWaiters() { counters.waiters = state.numWaiters(); }

  // May a PyTorch TCPStore client (which cannot authenticate) from
  // `address` be served, and may its silent 1.13 callback socket stay open?
  // On an open store: yes (as torchrun's). With a token: only from member
  // or configured trusted addresses (docs/security.md).
  bool trusts(const std::string& address) const {
    if (options.token.empty()) return true;
    const auto& trusted = options.trustedAddresses;
    return memberAddresses.contains(address) ||
           std::find(trusted.begin(), trusted.end(), address) != trusted.end();
  }
};

}  // namespace ddprun::rendezvous
