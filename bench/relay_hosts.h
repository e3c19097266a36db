// RelayHosts: the node relays of a simulated job for the fan-in benchmark:
// `relays` NodeRelays (the agent's own relay code, ddprun/agent/relay) in
// front of one store, spread over as many child processes as the
// descriptor limit needs (each relay holds its listener, its upstream and
// one descriptor per worker). start() returns once every relay's upstream
// has been accepted by the store, so a run times the workers alone, as
// workers start after their agents have joined.
//
// Thread-safety: one thread (it forks).
// Ownership: owns the child processes; stop() (or the destructor) kills
// and reaps them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::bench {

class RelayHosts {
 public:
  RelayHosts() = default;
  ~RelayHosts() { stop(); }
  RelayHosts(const RelayHosts&) = delete;
  RelayHosts& operator=(const RelayHosts&) = delete;

  // Starts `relays` relays to host:port (token: the store's), each ready
  // for `workersPerRelay` connections; throws when a host fails. Relay i is
  // node i: it listens on address(i):kRelayPort and connects from
  // address(i), as each node has an address of its own (all of 127/8 is
  // loopback): thousands of listeners on one address would crowd the
  // ephemeral ports every connect searches.
  void start(int relays, int workersPerRelay, const std::string& host, std::uint16_t port,
             const std::string& token, std::chrono::seconds limit,
             std::chrono::microseconds addWindow = {});
  void stop();
  static constexpr std::uint16_t kRelayPort = 29555;
  // 127.1.0.1 + i, host order.
  static std::uint32_t address(int relay) {
    return 0x7F010001u + static_cast<std::uint32_t>(relay);
  }
  int processes() const { return static_cast<int>(pids_.size()); }
  // What every relay did, summed over the hosts (after a run).
  struct Totals {
    std::uint64_t requests = 0;
    std::uint64_t upstreamRequests = 0;
    std::uint64_t coalesced = 0;
    std::uint64_t addsCombined = 0;
    std::uint64_t bytesSaved = 0;
  };
  // Asks every host for its counters; the hosts exit after answering.
  Totals totals();
  // The hosts' CPU seconds so far.
  double cpuSeconds() const;

 private:
  std::vector<pid_t> pids_;
  std::vector<int> commands_;  // parent -> host: 'c' counters, then exit on close
  std::vector<int> replies_;   // host -> parent
};

// User + system CPU seconds of process `pid` so far (from /proc).
double processCpuSeconds(pid_t pid);
// The kernel's count of connections dropped because a listen backlog was
// full (TcpExt ListenOverflows, /proc/net/netstat), or -1 when unreadable.
long long listenOverflows();

}  // namespace ddprun::bench
