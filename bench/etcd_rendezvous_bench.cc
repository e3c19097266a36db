#include "etcd_rendezvous_bench.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "ddprun/rendezvous/etcd_rendezvous.h"
#include "etcd_cluster.h"

namespace ddprun::bench {

using Clock = std::chrono::steady_clock;

namespace {

constexpr rlim_t kDescriptorsPerNode = 6;

// CPU seconds a process has used (user + system), from /proc/<pid>/stat.
double cpuSecondsOf(pid_t pid) {
  std::ifstream file(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double clusterCpuSeconds(const test_support::EtcdCluster& cluster) {
  double total = 0;
  for (pid_t pid : cluster.pids()) total += cpuSecondsOf(pid);
  return total;
}

double ownCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct RoundResult {
  double seconds = 0;
  double etcdCpuMsPerNode = 0;    // the 3 members together, during the round
  double clientCpuMsPerNode = 0;  // this process (every simulated node)
  double requestsPerNode = 0;
  double watchEventsPerNode = 0;
  double maxWatchEvents = 0;  // of a node other than the coordinator
  double coordinatorRequests = 0;
  double coordinatorWatchEvents = 0;
};

RoundResult oneRound(const test_support::EtcdCluster& cluster, int n, const std::string& id) {
  std::vector<std::unique_ptr<rendezvous::EtcdRendezvous>> nodes;
  for (int i = 0; i < n; ++i) {
    rendezvous::EtcdRendezvousOptions options;
    options.etcd = cluster.options();
    options.etcd.requestTimeout = std::chrono::seconds(30);
    options.rdzvId = id;
    options.nodeId = fmt::format("node{}", i);
    options.leaseTtl = std::chrono::seconds(60);
    options.connectTimeout = std::chrono::minutes(5);
    nodes.push_back(std::make_unique<rendezvous::EtcdRendezvous>(options));
  }
  std::mutex mutex;
  std::condition_variable go;
  bool started = false;
  std::atomic<int> failed{0};
  std::string firstError;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      rendezvous::protocol::JoinRequest request;
      request.rdzvId = id;
      request.nodeId = fmt::format("node{}", i);
      request.localWorldSize = 8;
      request.minNodes = static_cast<std::uint32_t>(n);
      request.maxNodes = static_cast<std::uint32_t>(n);
      request.address = "127.0.0.1";
      {
        std::unique_lock lock(mutex);
        go.wait(lock, [&] { return started; });
      }
      try {
        // Inside the clock: the lease, the alive key and the watch.
        nodes[static_cast<std::size_t>(i)]->connect();
        nodes[static_cast<std::size_t>(i)]->join(request, std::chrono::minutes(5));
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        if (failed++ == 0) firstError = e.what();
      }
    });
  }
  const double etcdCpuBefore = clusterCpuSeconds(cluster);
  const double clientCpuBefore = ownCpuSeconds();
  const auto start = Clock::now();
  {
    std::lock_guard lock(mutex);
    started = true;
  }
  go.notify_all();
  for (auto& t : threads) t.join();
  RoundResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.etcdCpuMsPerNode = (clusterCpuSeconds(cluster) - etcdCpuBefore) * 1000 / n;
  result.clientCpuMsPerNode = (ownCpuSeconds() - clientCpuBefore) * 1000 / n;
  for (auto& node : nodes) {
    const auto stats = node->stats();
    result.requestsPerNode += static_cast<double>(stats.requests) / n;
    result.watchEventsPerNode += static_cast<double>(stats.watchEvents) / n;
    if (stats.coordinator) {
      result.coordinatorRequests = static_cast<double>(stats.requests);
      result.coordinatorWatchEvents = static_cast<double>(stats.watchEvents);
    } else {
      result.maxWatchEvents =
          std::max(result.maxWatchEvents, static_cast<double>(stats.watchEvents));
    }
  }
  for (auto& node : nodes) node->shutdown();  // no node reacts to the others' leases going
  nodes.clear();
  if (failed > 0) {
    throw std::runtime_error(
        fmt::format("{} of {} joins failed; the first: {}", failed.load(), n, firstError));
  }
  return result;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

std::vector<RendezvousResult> runEtcdRendezvousBenchmark(const RendezvousBenchOptions& options,
                                                         std::ostream& log) {
  // Each simulated node holds two connections (four descriptors each with
  // their event loops); the etcd members, started below, inherit the limit.
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t wanted = 1 << 18;
  rlimit raised{std::max(limit.rlim_cur, wanted), std::max(limit.rlim_max, wanted)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {  // raising the hard limit needs root
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  test_support::EtcdCluster cluster(3);
  std::vector<RendezvousResult> results;
  ::getrlimit(RLIMIT_NOFILE, &limit);
  for (int n : options.nodes) {
    // All simulated nodes live in this one process: 6 descriptors each (two
    // connections, each with its event loop's epoll and eventfd).
    const auto needed = static_cast<rlim_t>(n) * kDescriptorsPerNode + 1024;
    if (limit.rlim_cur < needed) {
      log << fmt::format(
          "  etcd: {} nodes skipped: they need about {} file descriptors in this one process and "
          "it may open {} (ulimit -n; raising the hard limit needs CAP_SYS_RESOURCE)\n",
          n, needed, limit.rlim_cur);
      continue;
    }
    RendezvousResult result;
    result.nodes = n;
    std::vector<double> requests, events, maxEvents, coordinatorRequests, coordinatorEvents,
        etcdCpu, clientCpu;
    for (int r = 0; r < options.repeat; ++r) {
      const RoundResult round = oneRound(cluster, n, fmt::format("bench-{}-{}", n, r));
      result.seconds.push_back(round.seconds);
      requests.push_back(round.requestsPerNode);
      events.push_back(round.watchEventsPerNode);
      maxEvents.push_back(round.maxWatchEvents);
      coordinatorRequests.push_back(round.coordinatorRequests);
      coordinatorEvents.push_back(round.coordinatorWatchEvents);
      etcdCpu.push_back(round.etcdCpuMsPerNode);
      clientCpu.push_back(round.clientCpuMsPerNode);
      log << fmt::format(
          "  etcd: {} nodes, run {} of {}: {:.1f} ms, {:.1f} requests and {:.1f} watch events per "
          "node (at most {:.0f} but the coordinator's {:.0f} requests and {:.0f} events); CPU per "
          "node: etcd {:.2f} ms, nodes {:.2f} ms\n",
          n, r + 1, options.repeat, round.seconds * 1000, round.requestsPerNode,
          round.watchEventsPerNode, round.maxWatchEvents, round.coordinatorRequests,
          round.coordinatorWatchEvents, round.etcdCpuMsPerNode, round.clientCpuMsPerNode);
    }
    result.requestsPerNode = median(requests);
    result.watchEventsPerNode = median(events);
    result.maxWatchEvents = median(maxEvents);
    result.coordinatorRequests = median(coordinatorRequests);
    result.coordinatorWatchEvents = median(coordinatorEvents);
    result.etcdCpuMsPerNode = median(etcdCpu);
    result.clientCpuMsPerNode = median(clientCpu);
    results.push_back(result);
  }
  return results;
}

void printBackendComparison(const std::vector<RendezvousResult>& c10d,
                            const std::vector<RendezvousResult>& etcd, std::ostream& out) {
  out << "\nRendezvous round over etcd (3 members on loopback, one EtcdRendezvous per node) "
         "against the c10d store (ddprun-rendezvous), medians of the same run\n\n";
  out << "| nodes | c10d store | etcd | etcd / c10d | etcd requests per node | watch events "
         "per node (most, coordinator aside) | coordinator: requests, events | CPU per node: etcd "
         "members, nodes |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& c : c10d) {
    const auto e = std::find_if(etcd.begin(), etcd.end(),
                                [&](const RendezvousResult& r) { return r.nodes == c.nodes; });
    const double a = median(c.seconds);
    if (e == etcd.end()) {
      out << fmt::format("| {} | {:.1f} ms | not run (see the log) | | | | | |\n", c.nodes,
                         a * 1000);
      continue;
    }
    const double b = median(e->seconds);
    out << fmt::format(
        "| {} | {:.1f} ms | {:.1f} ms | {:.1f}x | {:.1f} | {:.1f} ({:.0f}) | {:.0f}, {:.0f} | "
        "{:.2f} ms, {:.2f} ms |\n",
        c.nodes, a * 1000, b * 1000, b / a, e->requestsPerNode, e->watchEventsPerNode,
        e->maxWatchEvents, e->coordinatorRequests, e->coordinatorWatchEvents, e->etcdCpuMsPerNode,
        e->clientCpuMsPerNode);
  }
}

}  // namespace ddprun::bench
