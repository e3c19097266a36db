#include "etcd_rendezvous_bench.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "ddprun/common/proc_info.h"
#include "ddprun/rendezvous/etcd_rendezvous.h"
#include "etcd_cluster.h"
#include "monotonic_clock.h"

namespace ddprun::bench {

namespace {

constexpr rlim_t kDescriptorsPerNode = 6;
constexpr rlim_t kNodesPerProcess = 1024;

double clusterCpuSeconds(const harness::EtcdCluster& cluster) {
  std::uint64_t ticks = 0;
  for (pid_t pid : cluster.pids()) {
    if (const auto stat = readProcStat(pid)) ticks += stat->cpuTicks;
  }
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
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
  double clientCpuMsPerNode = 0;  // the processes hosting the nodes
  double requestsPerNode = 0;
  double watchEventsPerNode = 0;
  double maxWatchEvents = 0;  // of a node other than the coordinator
  double coordinatorRequests = 0;
  double coordinatorWatchEvents = 0;
};

// What one process's share of the nodes did: its line to the parent.
struct ShareReport {
  int failed = 0;
  std::int64_t finishedNs = 0;  // CLOCK_MONOTONIC: comparable across processes
  double cpuSeconds = 0;
  double requests = 0;
  double watchEvents = 0;
  double maxWatchEvents = 0;
  double coordinatorRequests = -1;  // -1: the coordinator is elsewhere
  double coordinatorWatchEvents = 0;
  std::string firstError;
};

// In a child process: nodes [first, first + count) of `n`, joined at once
// when `goFd` says go.
ShareReport runShare(const harness::EtcdCluster& cluster, int n, const std::string& id, int first,
                     int count, int goFd,
                     std::vector<std::unique_ptr<rendezvous::EtcdRendezvous>>& nodes) {
  for (int i = first; i < first + count; ++i) {
    rendezvous::EtcdRendezvousOptions options;
    options.etcd = cluster.options();
    // Two cores for 3 members and thousands of nodes: etcd may stay busy
    // (proposals timing out) for a while; each call asks again until this.
    options.etcd.requestTimeout = std::chrono::seconds(120);
    options.rdzvId = id;
    options.nodeId = fmt::format("node{}", i);
    options.leaseTtl = std::chrono::seconds(60);
    options.connectTimeout = std::chrono::minutes(5);
    nodes.push_back(std::make_unique<rendezvous::EtcdRendezvous>(options));
  }
  std::mutex mutex;
  std::condition_variable go;
  bool started = false;
  ShareReport report;
  std::vector<std::thread> threads;
  for (int k = 0; k < count; ++k) {
    threads.emplace_back([&, k] {
      rendezvous::protocol::JoinRequest request;
      request.rdzvId = id;
      request.nodeId = fmt::format("node{}", first + k);
      request.localWorldSize = 8;
      request.minNodes = static_cast<std::uint32_t>(n);
      request.maxNodes = static_cast<std::uint32_t>(n);
      request.address = "127.0.0.1";
      {
        std::unique_lock lock(mutex);
        go.wait(lock, [&] { return started; });
      }
      try {
        // Inside the clock: the lease, the watch and the alive key.
        nodes[static_cast<std::size_t>(k)]->connect();
        nodes[static_cast<std::size_t>(k)]->join(request, std::chrono::minutes(5));
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        if (report.failed++ == 0) report.firstError = e.what();
      }
    });
  }
  char byte = 0;
  if (::read(goFd, &byte, 1) != 1) throw std::runtime_error("the benchmark went away");
  const double cpuBefore = ownCpuSeconds();
  {
    std::lock_guard lock(mutex);
    started = true;
  }
  go.notify_all();
  // Leases renewed as agents do (every third of the TTL), for rounds that
  // take long on two cores.
  bool done = false;
  std::thread renewer([&] {
    std::unique_lock lock(mutex);
    while (!go.wait_for(lock, std::chrono::seconds(20), [&] { return done; })) {
      lock.unlock();
      for (auto& node : nodes) {
        try {
          node->keepAlive(std::chrono::steady_clock::now() + std::chrono::seconds(20));
        } catch (const std::exception&) {
          // Not started yet, or etcd busy: the next turn.
        }
      }
      lock.lock();
    }
  });
  for (auto& t : threads) t.join();
  report.finishedNs = monotonicNs();
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  go.notify_all();
  renewer.join();
  report.cpuSeconds = ownCpuSeconds() - cpuBefore;
  for (auto& node : nodes) {
    const auto stats = node->stats();
    report.requests += static_cast<double>(stats.requests);
    report.watchEvents += static_cast<double>(stats.watchEvents);
    if (stats.coordinator) {
      report.coordinatorRequests = static_cast<double>(stats.requests);
      report.coordinatorWatchEvents = static_cast<double>(stats.watchEvents);
    } else {
      report.maxWatchEvents =
          std::max(report.maxWatchEvents, static_cast<double>(stats.watchEvents));
    }
  }
  return report;
}

struct Share {
  pid_t pid = -1;
  int go = -1;      // the parent writes one byte: go; a second: shut down
  int report = -1;  // the child writes its ShareReport as one line
};

// Reads a child's one line (the child may take minutes: joins time out at
// 5 min).
ShareReport readReport(const Share& share) {
  std::string text;
  char buffer[1024];
  for (;;) {
    const ssize_t got = ::read(share.report, buffer, sizeof(buffer));
    if (got <= 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.find('\n') != std::string::npos) break;
  }
  ShareReport r;
  long long finished = 0;
  int errorAt = 0;
  if (std::sscanf(text.c_str(), "%d %lld %lf %lf %lf %lf %lf %lf %n", &r.failed, &finished,
                  &r.cpuSeconds, &r.requests, &r.watchEvents, &r.maxWatchEvents,
                  &r.coordinatorRequests, &r.coordinatorWatchEvents, &errorAt) < 8) {
    r.failed = 1;
    r.firstError = text.empty() ? "a node process died" : text;
    return r;
  }
  r.finishedNs = finished;
  r.firstError = text.substr(static_cast<std::size_t>(errorAt));
  while (!r.firstError.empty() && r.firstError.back() == '\n') r.firstError.pop_back();
  return r;
}

// One round of `n` nodes, spread over processes of at most `perProcess`
// (as real nodes are: each process has its own descriptor limit).
RoundResult oneRound(const harness::EtcdCluster& cluster, int n, const std::string& id,
                     int perProcess) {
  const int processes = (n + perProcess - 1) / perProcess;
  std::fflush(nullptr);  // a child must not write this process's buffered output again
  std::vector<Share> shares;
  for (int p = 0; p < processes; ++p) {
    int go[2];
    int report[2];
    if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    const int first = n * p / processes;
    const int count = n * (p + 1) / processes - first;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      ::close(report[0]);
      std::string line;
      std::vector<std::unique_ptr<rendezvous::EtcdRendezvous>> nodes;
      try {
        const ShareReport r = runShare(cluster, n, id, first, count, go[0], nodes);
        line = fmt::format("{} {} {} {} {} {} {} {} {}\n", r.failed, r.finishedNs, r.cpuSeconds,
                           r.requests, r.watchEvents, r.maxWatchEvents, r.coordinatorRequests,
                           r.coordinatorWatchEvents, r.firstError);
      } catch (const std::exception& e) {
        line = fmt::format("{}\n", e.what());
      }
      if (::write(report[1], line.data(), line.size()) < 0) ::_exit(1);
      char byte = 0;
      // Every process's nodes stay until all are done: none reacts to
      // another's lease going.
      if (::read(go[0], &byte, 1) == 1) {
        for (auto& node : nodes) node->shutdown();
        nodes.clear();
      }
      ::_exit(0);
    }
    ::close(go[0]);
    ::close(report[1]);
    shares.push_back({pid, go[1], report[0]});
  }
  const double etcdCpuBefore = clusterCpuSeconds(cluster);
  const std::int64_t started = monotonicNs();
  for (const auto& share : shares) {
    if (::write(share.go, "g", 1) != 1) throw std::runtime_error("a node process is gone");
  }
  RoundResult result;
  std::int64_t finished = started;
  int failed = 0;
  std::string firstError;
  double cpu = 0;
  for (const auto& share : shares) {
    const ShareReport r = readReport(share);
    finished = std::max(finished, r.finishedNs);
    failed += r.failed;
    if (firstError.empty()) firstError = r.firstError;
    cpu += r.cpuSeconds;
    result.requestsPerNode += r.requests / n;
    result.watchEventsPerNode += r.watchEvents / n;
    result.maxWatchEvents = std::max(result.maxWatchEvents, r.maxWatchEvents);
    if (r.coordinatorRequests >= 0) {
      result.coordinatorRequests = r.coordinatorRequests;
      result.coordinatorWatchEvents = r.coordinatorWatchEvents;
    }
  }
  result.seconds = static_cast<double>(finished - started) / 1e9;
  result.etcdCpuMsPerNode = (clusterCpuSeconds(cluster) - etcdCpuBefore) * 1000 / n;
  result.clientCpuMsPerNode = cpu * 1000 / n;
  for (const auto& share : shares) {
    if (::write(share.go, "q", 1) != 1) {
      // Gone already.
    }
    ::waitpid(share.pid, nullptr, 0);
    ::close(share.go);
    ::close(share.report);
  }
  if (failed > 0) {
    throw std::runtime_error(
        fmt::format("{} of {} joins failed; the first: {}", failed, n, firstError));
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
  // Each simulated node holds two connections (three descriptors each
  // with their event loops); the etcd members, started below, inherit the
  // limit. The nodes are spread over processes as real ones are.
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t wanted = 1 << 18;
  rlimit raised{std::max(limit.rlim_cur, wanted), std::max(limit.rlim_max, wanted)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {  // raising the hard limit needs root
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  harness::EtcdCluster cluster(3, std::nullopt, harness::EtcdTiming{100, 1000});
  std::vector<RendezvousResult> results;
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const int perProcess = static_cast<int>(std::min<rlim_t>(
      kNodesPerProcess,
      (limit.rlim_cur - std::min<rlim_t>(limit.rlim_cur, 1024)) / kDescriptorsPerNode));
  for (int n : options.nodes) {
    if (perProcess < 1) {
      log << fmt::format("  etcd: {} nodes skipped: this process may open only {} descriptors\n", n,
                         limit.rlim_cur);
      continue;
    }
    RendezvousResult result;
    result.nodes = n;
    std::vector<double> requests, events, maxEvents, coordinatorRequests, coordinatorEvents,
        etcdCpu, clientCpu;
    for (int r = 0; r < options.repeat; ++r) {
      const RoundResult round = oneRound(cluster, n, fmt::format("bench-{}-{}", n, r), perProcess);
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
