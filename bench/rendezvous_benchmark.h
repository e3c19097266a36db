// RendezvousBenchmark: how long one rendezvous round takes for N nodes.
//
// A load generator opens N authenticated connections to a fresh
// ddprun-rendezvous daemon (one per simulated agent), then sends every
// node's JOIN and waits for every assignment, all from one thread with
// epoll. Reported: the time from the first JOIN sent to the last
// assignment received, and the messages per node (frames each way).
//
// Thread-safety: run() from one thread.
#pragma once

#include <chrono>
#include <filesystem>
#include <ostream>
#include <vector>

namespace ddprun::bench {

struct RendezvousBenchOptions {
  std::vector<int> nodes = {64, 256, 1024, 4096};
  int repeat = 3;
};

struct RendezvousResult {
  int nodes = 0;
  std::vector<double> seconds;  // one per repeat
  double messagesPerNode = 0;   // frames sent + received per node, handshake included
  // etcd: gateway requests and watch events per node per round (medians
  // over the repeats), the most events one node other than the coordinator
  // got, and the coordinator's requests and events.
  double requestsPerNode = 0;
  double watchEventsPerNode = 0;
  double maxWatchEvents = 0;
  double coordinatorRequests = 0;
  double coordinatorWatchEvents = 0;
  // etcd: CPU milliseconds per node during the round, of the etcd members
  // together and of the benchmark's own process (every simulated node).
  double etcdCpuMsPerNode = 0;
  double clientCpuMsPerNode = 0;
};

std::vector<RendezvousResult> runRendezvousBenchmark(const RendezvousBenchOptions& options,
                                                     const std::filesystem::path& daemonPath,
                                                     std::ostream& log);

void printRendezvousTable(const std::vector<RendezvousResult>& results, std::ostream& out);

}  // namespace ddprun::bench
