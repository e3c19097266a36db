// ddprun-chaos: a seeded fault soak of ddprun jobs on hosts made of network
// namespaces (docs/self-healing.md, "The chaos soak").
//
//   ddprun-chaos --seed 7               one run; the same seed replays it
//   ddprun-chaos --seed 1 --runs 500    seeds 1 to 500
//   ddprun-chaos --seed 1 --each-kind   one run of each fault kind (CI)
//   ddprun-chaos --seed 3 --kind agent-term --verbose
//   ddprun-chaos --seed 1 --runs 500 --plans   what those runs would do
//   ddprun-chaos --slurm --seed 1 --each-kind   the same on a Slurm cluster
//
// With --slurm the jobs are Slurm job steps on a real Slurm cluster of three
// nodes (harness/slurm_cluster.h), started once for all runs: one
// `srun ddprun` per node, and only the faults that can happen to a step.
// `--supervise PREFIX -- PROGRAM ARGS...` is how each such task runs its
// agent (chaos_process.h).
//
// Each run prints one line (its plan, outcome, time and violations); the
// last line is "runs=N violations=V". Exit 0 when V is 0, 1 otherwise, 2 for
// bad usage, 77 on a machine that cannot make the hosts. A failed run's files
// stay in --folder (default: a temporary folder, removed after a clean run).
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "chaos_plan.h"
#include "chaos_process.h"
#include "chaos_run.h"
#include "host_network.h"
#include "slurm_cluster.h"

namespace {

namespace fs = std::filesystem;
using ddprun::chaos::FaultKind;

int usage(const std::string& problem) {
  std::cerr << "ddprun-chaos: " << problem
            << "\nusage: ddprun-chaos --seed N [--runs K | --each-kind | --kind NAME] [--folder "
               "DIR] [--verbose] [--plans] [--slurm]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--supervise" && std::string(argv[3]) == "--") {
    return ddprun::chaos::supervise(argv[2], std::vector<std::string>(argv + 4, argv + argc));
  }
  std::uint64_t seed = 0;
  bool slurm = false;
  bool seedGiven = false;
  int runs = 1;
  bool eachKind = false;
  bool verbose = false;
  bool plansOnly = false;
  std::optional<FaultKind> only;
  fs::path folder = fs::temp_directory_path() / fmt::format("ddprun-chaos-{}", ::getpid());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--seed") {
        seed = std::stoull(value());
        seedGiven = true;
      } else if (arg == "--runs") {
        runs = std::stoi(value());
      } else if (arg == "--each-kind") {
        eachKind = true;
      } else if (arg == "--kind") {
        const std::string name = value();
        only = ddprun::chaos::kindNamed(name);
        if (!only) return usage("no fault kind is called '" + name + "'");
      } else if (arg == "--folder") {
        folder = value();
      } else if (arg == "--verbose") {
        verbose = true;
      } else if (arg == "--plans") {
        plansOnly = true;
      } else if (arg == "--slurm") {
        slurm = true;
      } else {
        return usage("unknown argument '" + arg + "'");
      }
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (!seedGiven) return usage("--seed is required (it makes a run reproducible)");
  if (runs < 1) return usage("--runs must be at least 1");
  if (slurm && only && !ddprun::chaos::appliesToSlurm(*only)) {
    return usage(fmt::format("a fault of kind '{}' cannot happen to a Slurm job step",
                             ddprun::chaos::kindName(*only)));
  }
  std::vector<FaultKind> kinds;  // --each-kind's
  for (int k = 0; k < static_cast<int>(FaultKind::kCount); ++k) {
    const auto kind = static_cast<FaultKind>(k);
    if (!slurm || ddprun::chaos::appliesToSlurm(kind)) kinds.push_back(kind);
  }
  const int total = eachKind ? static_cast<int>(kinds.size()) : runs;
  const auto planOf = [&](int i) {
    const auto kind =
        eachKind ? std::optional<FaultKind>(kinds[static_cast<std::size_t>(i)]) : only;
    return ddprun::chaos::drawPlan(seed + static_cast<std::uint64_t>(i), kind, slurm);
  };
  if (plansOnly) {
    for (int i = 0; i < total; ++i) std::cout << ddprun::chaos::describe(planOf(i)) << "\n";
    return 0;
  }
  if (const auto why = ddprun::harness::HostNetwork::unavailable()) {
    std::cerr << "ddprun-chaos: cannot make hosts on this machine: " << *why << "\n";
    return 77;  // ctest's "skipped", as the network tests skip
  }
  std::unique_ptr<ddprun::harness::SlurmCluster> cluster;
  if (slurm) {
    using ddprun::harness::SlurmCluster;
    if (const auto why = SlurmCluster::unavailable()) {
      std::cerr << "ddprun-chaos: no Slurm cluster on this machine: " << *why << "\n";
      return 77;
    }
    cluster = std::make_unique<SlurmCluster>(SlurmCluster::Options{.nodes = 3});
  }
  int violations = 0;
  for (int i = 0; i < total; ++i) {
    const auto plan = planOf(i);
    const fs::path runFolder = folder / fmt::format("seed-{}", plan.seed);
    fs::remove_all(runFolder);
    const auto result = ddprun::chaos::runPlan(plan, runFolder, verbose, cluster.get());
    if (cluster) cluster->cancelAllAndWaitIdle(std::chrono::minutes(1));
    std::cout << fmt::format("{} => {} in {:.1f} s{}", ddprun::chaos::describe(plan),
                             result.outcome, result.seconds,
                             result.violations.empty() ? "" : "; VIOLATIONS:")
              << std::endl;
    for (const auto& v : result.violations) std::cout << "  - " << v << std::endl;
    if (result.violations.empty()) {
      fs::remove_all(runFolder);
    } else {
      std::cout << "  files: " << runFolder.string() << std::endl;
      violations += static_cast<int>(result.violations.size());
    }
  }
  std::error_code ignored;
  fs::remove(folder, ignored);  // only when empty: a failed run's files stay
  std::cout << fmt::format("runs={} violations={}", total, violations) << std::endl;
  return violations == 0 ? 0 : 1;
}
