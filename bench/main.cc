// ddprun-bench: benchmarks that measure ddprun against the reference system
// in the same run and report the ratio (see docs/benchmarks.md).
//
//   ddprun-bench store [--clients 1,4,16,64] [--seconds 3] [--repeat 3] [--json FILE]
//
// `store` measures aggregate set+get calls per second of ddprun's
// StoreClient against the ddprun-rendezvous daemon, and of LibTorch's
// c10d::TCPStore client against its own server, each server in its own child
// process. `c10d-server` (hidden) is that child for the c10d server.
#include <signal.h>

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun_driver.h"
#include "etcd_rendezvous_bench.h"
#include "fanin_benchmark.h"
#include "rendezvous_benchmark.h"
#include "store_benchmark.h"
#include "store_report.h"
#ifdef DDPRUN_BENCH_HAVE_TORCH
#include "tcp_store.h"
#include "tcp_store_driver.h"
#endif

namespace {

namespace bench = ddprun::bench;
namespace fs = std::filesystem;

fs::path thisExecutable() { return fs::read_symlink("/proc/self/exe"); }

int runStore(const bench::StoreBenchOptions& options, const fs::path& daemonPath,
             const std::string& jsonPath) {
  if (!fs::exists(daemonPath)) {
    std::cerr << "ddprun-bench: error: the daemon " << daemonPath
              << " does not exist; build it (cmake --build build --target ddprun-rendezvous) "
                 "or pass --daemon PATH\n";
    return 2;
  }
  std::vector<std::unique_ptr<bench::StoreDriver>> drivers;
  drivers.push_back(std::make_unique<bench::DdprunDriver>(daemonPath));
  bool referenceAvailable = false;
#ifdef DDPRUN_BENCH_HAVE_TORCH
  drivers.push_back(std::make_unique<bench::TcpStoreDriver>(thisExecutable()));
  drivers.push_back(bench::TcpStoreDriver::againstDaemon(daemonPath));
  referenceAvailable = true;
#endif
  if (!referenceAvailable) {
    std::cerr << "ddprun-bench: reference unavailable (built without LibTorch); measuring "
                 "ddprun only\n";
  }
  bench::StoreBenchmark benchmark(options, std::move(drivers));
  std::cerr << "ddprun-bench store: measuring (one line per run)\n";
  bench::StoreReport report(options, benchmark.run(std::cerr), referenceAvailable);
  report.printTable(std::cout);
  if (!jsonPath.empty()) {
    report.writeJson(jsonPath);
    std::cerr << "ddprun-bench: wrote " << jsonPath << "\n";
  }
  return report.allSucceeded() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddprun-bench: ddprun measured against the reference system in the same run"};
  app.require_subcommand(1);

  bench::StoreBenchOptions options;
  double seconds = options.duration.count();
  std::string jsonPath;
  std::string daemonPath = (thisExecutable().parent_path() / "ddprun-rendezvous").string();
  CLI::App* store = app.add_subcommand(
      "store",
      "aggregate set+get round trips per second: ddprun's client and daemon against "
      "c10d::TCPStore");
  store->add_option("--clients", options.clients, "client threads, as a comma list")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->default_str("1,4,16,64");
  store->add_option("--seconds", seconds, "measured seconds per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  store->add_option("--repeat", options.repeat, "runs per configuration (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  store->add_option("--value-bytes", options.valueBytes, "size of every value set")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  store->add_option("--json", jsonPath, "also write the results as JSON to FILE");
  store->add_option("--daemon", daemonPath, "the ddprun-rendezvous binary")->capture_default_str();

  bench::RendezvousBenchOptions rdzvOptions;
  CLI::App* rdzv = app.add_subcommand(
      "rendezvous", "time one rendezvous round of N simulated nodes against ddprun-rendezvous");
  rdzv->add_option("--nodes", rdzvOptions.nodes, "node counts, as a comma list")
      ->delimiter(',')
      ->capture_default_str();
  rdzv->add_option("--repeat", rdzvOptions.repeat, "runs per node count (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  rdzv->add_option("--daemon", daemonPath, "the ddprun-rendezvous binary");
  bool withEtcd = false;
  rdzv->add_flag("--etcd", withEtcd,
                 "also time the rounds over etcd (a 3-member cluster on loopback, etcd from "
                 "scripts/setup) and compare");

  bench::FaninOptions faninOptions;
  int faninLimit = 120;
  bool noReference = false;
  CLI::App* fanin = app.add_subcommand(
      "fanin", "N worker ranks reach the store as init_process_group does (docs/benchmarks.md)");
  fanin->add_option("--ranks", faninOptions.ranks, "rank counts, as a comma list")
      ->delimiter(',')
      ->capture_default_str();
  fanin->add_option("--processes", faninOptions.processes, "client processes")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  fanin->add_option("--sources", faninOptions.sources, "loopback source addresses (127.0.0.x)")
      ->check(CLI::Range(1, 250))
      ->capture_default_str();
  fanin
      ->add_option("--window", faninOptions.window,
                   "connections per client process awaiting their first reply")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  fanin->add_option("--limit", faninLimit, "seconds a run may take")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  fanin->add_flag("--no-reference", noReference, "skip the reference server");
  fanin->add_option("--daemon", daemonPath, "the ddprun-rendezvous binary");
  std::string faninDialect = "1.13";
  fanin
      ->add_option("--dialect", faninDialect,
                   "the ranks' TCPStore protocol: 1.13 (no handshake) or 2.x (VALIDATE and PING "
                   "first, 2.2+ opcodes; the 1.13 reference cannot serve it)")
      ->check(CLI::IsMember({"1.13", "2.x"}))
      ->capture_default_str();
  std::string referenceCommand;
  fanin->add_option("--reference-command", referenceCommand,
                    "the reference server instead of LibTorch 1.13's: a command line (split at "
                    "spaces; the program as a path) that prints 'listening on HOST:PORT', "
                    "started afresh for every run, e.g. bench/tcpstore_server.py");
  fanin
      ->add_option("--reference-name", faninOptions.referenceName,
                   "the reference's column in the table")
      ->capture_default_str();
  fanin
      ->add_option("--ranks-per-node", faninOptions.ranksPerNode,
                   "reach the store through node relays (the agent's), this many ranks per node, "
                   "in two scenarios (init_process_group, NCCL's scalable init), then the flat "
                   "path at --flat-ranks beside the reference")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  fanin
      ->add_option("--scalable-max-ranks", faninOptions.scalableMaxRanks,
                   "run NCCL's scalable init only up to this many ranks")
      ->capture_default_str();
  int addWindowUs = static_cast<int>(faninOptions.addWindow.count());
  fanin
      ->add_option("--add-window-us", addWindowUs,
                   "the relays' ADD combining window in microseconds (RelayOptions::addWindow)")
      ->capture_default_str();
  fanin->add_option("--flat-ranks", faninOptions.flatRanks, "ranks of the flat comparison")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();

#ifdef DDPRUN_BENCH_HAVE_TORCH
  // Internal: the child process that hosts the reference server.
  CLI::App* c10dServer =
      app.add_subcommand("c10d-server", "run a c10d::TCPStore server (used by `store`)");
  c10dServer->group("");
#endif

  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);

#ifdef DDPRUN_BENCH_HAVE_TORCH
  if (c10dServer->parsed()) return bench::runTcpStoreServer();
#endif
  try {
    if (fanin->parsed()) {
      faninOptions.limit = std::chrono::seconds(faninLimit);
      faninOptions.addWindow = std::chrono::microseconds(addWindowUs);
      faninOptions.dialect =
          faninDialect == "2.x" ? bench::FaninDialect::kV2 : bench::FaninDialect::kV1;
      std::istringstream words(referenceCommand);
      for (std::string word; words >> word;) faninOptions.referenceCommand.push_back(word);
#ifdef DDPRUN_BENCH_HAVE_TORCH
      faninOptions.reference = !noReference;
#else
      faninOptions.reference = !noReference && !faninOptions.referenceCommand.empty();
#endif
      std::cerr << "ddprun-bench fanin: measuring\n";
      if (faninOptions.ranksPerNode > 0) {
        bench::printRelayFaninTable(
            bench::runRelayFaninBenchmark(faninOptions, daemonPath, std::cerr), faninOptions,
            std::cout);
        return 0;
      }
      bench::printFaninTable(
          bench::runFaninBenchmark(faninOptions, daemonPath, thisExecutable(), std::cerr),
          faninOptions, std::cout);
      return 0;
    }
    if (rdzv->parsed()) {
      std::cerr << "ddprun-bench rendezvous: measuring\n";
      const auto c10d = bench::runRendezvousBenchmark(rdzvOptions, daemonPath, std::cerr);
      bench::printRendezvousTable(c10d, std::cout);
      if (withEtcd) {
        const auto etcd = bench::runEtcdRendezvousBenchmark(rdzvOptions, std::cerr);
        bench::printBackendComparison(c10d, etcd, std::cout);
      }
      return 0;
    }
    options.duration = std::chrono::duration<double>(seconds);
    return runStore(options, daemonPath, jsonPath);
  } catch (const std::exception& e) {
    std::cerr << "ddprun-bench: error: " << e.what() << "\n";
    return 1;
  }
}
