// ddprun-network-bench: what a job does when the network fails, under ddprun
// and under torchrun (the project's current PyTorch), side by side in the
// same run, on hosts made of network namespaces (harness/host_network.h).
//
//   detection: an elastic 2:3 job (c10d, keep_alive 1 s x 3, one Python
//   worker per host training over Gloo). Host 2 is either cut off silently
//   at the switch or killed (every process on it, SIGKILL). Reported: the
//   time until both other hosts train again at WORLD_SIZE=2 ("re-formed"),
//   and for a cut-off host, until its own agent exits ("cut-off agent ends").
//   rendezvous: 4 nodes (c10d, --nnodes=4) launching `echo`, from the start
//   of the agents to the last worker's line, on a clean network and with
//   every frame delayed 100 +- 20 ms and 2 % of them lost.
//
// Needs root (namespaces); times are medians of --repeat runs; "-" means the
// event did not happen within --give-up seconds.
#include <signal.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "host_network.h"

namespace {

using namespace std::chrono_literals;
using ddprun::harness::ChildProcess;
using ddprun::harness::HostNetwork;
using Clock = std::chrono::steady_clock;

constexpr char kWorker[] = R"(
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
print(f"training world {dist.get_world_size()}", flush=True)
t = torch.ones(1)
while True:
    dist.all_reduce(t); time.sleep(0.05)
)";

struct Options {
  int repeat = 3;
  double giveUp = 60;
  std::string python = std::string(DDPRUN_VENV_BIN) + "/python";
  std::string torchrun = std::string(DDPRUN_VENV_BIN) + "/torchrun";
  std::string ddprun = std::string(DDPRUN_BIN_DIR) + "/ddprun";
};

// One agent and everything it printed.
struct Agent {
  std::unique_ptr<ChildProcess> process;
  std::string out;
  bool exited = false;

  // Reads what is there; true once `text` has been printed.
  bool printed(const std::string& text) {
    out += process->drainStdout();
    (void)process->drainStderr();
    return out.find(text) != std::string::npos;
  }
  bool hasExited() {
    (void)printed("");
    exited = exited || process->wait(0ms).has_value();
    return exited;
  }
  // Waits until `text` has been printed; false at `deadline`.
  bool waitFor(const std::string& text, Clock::time_point deadline) {
    while (!printed(text)) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
};

std::vector<std::string> agentArgv(const Options& o, bool torchrun, const HostNetwork& net,
                                   int host, const std::string& nnodes, const std::string& conf,
                                   std::vector<std::string> program) {
  std::vector<std::string> argv = {
      torchrun ? o.torchrun : o.ddprun, "--nnodes=" + nnodes, "--nproc_per_node=1",
      "--rdzv_backend=c10d", "--rdzv_endpoint=" + net.endpoint(0, 29400), "--rdzv_id=bench",
      "--rdzv_conf=" + conf + (host == 0 ? ",is_host=1" : ",is_host=0"),
      // torchrun advertises its host name otherwise, which
      // resolves to 127.0.0.1 here; both get the same flag.
      "--local_addr=" + net.address(host), "--max_restarts=3", "--monitor_interval=0.1",
      "--no-python"};
  if (torchrun) {
    // torchrun 2.x's default output options; its logs stay out of the way.
    argv.insert(argv.begin() + 1, "--log_dir=/tmp/ddprun-network-bench-torchrun");
  }
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::map<std::string, std::string> agentEnv(const HostNetwork& net) {
  // torchrun leaves Gloo to the host name (127.0.0.1 here): name the
  // interface for both, so that torchrun's workers can train at all.
  return {{"OMP_NUM_THREADS", "1"},
          {"GLOO_SOCKET_IFNAME", net.routedInterface()},
          {"TORCHELASTIC_ERROR_FILE", ""}};
}

struct DetectionRun {
  std::optional<double> reformed;  // seconds from the fault
  std::optional<double> agentEnded;
};

DetectionRun detectOnce(const Options& o, bool torchrun, bool silent) {
  HostNetwork net({.hosts = 3});
  std::vector<Agent> agents;
  for (int h = 0; h < 3; ++h) {
    agents.push_back(Agent{
        net.start(h,
                  agentArgv(o, torchrun, net, h, "2:3",
                            "keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1",
                            {o.python, "-c", kWorker}),
                  agentEnv(net)),
        ""});
  }
  const auto formDeadline = Clock::now() + 120s;
  for (auto& a : agents) {
    if (!a.waitFor("training world 3", formDeadline)) {
      throw std::runtime_error("the 3-node job did not form");
    }
  }
  const auto fault = Clock::now();
  if (silent) {
    net.cut(2);
  } else {
    (void)net.runIn(2, "kill -KILL $(ip netns pids " + net.namespaceName(2) + ") 2>/dev/null");
  }
  const auto giveUp =
      fault + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.giveUp));
  const auto seconds = [fault] {
    return std::chrono::duration<double>(Clock::now() - fault).count();
  };
  // Both events are watched together, each timed when first seen.
  DetectionRun run;
  while (Clock::now() < giveUp && (!run.reformed || (silent && !run.agentEnded))) {
    if (!run.reformed && agents[0].printed("training world 2") &&
        agents[1].printed("training world 2")) {
      run.reformed = seconds();
    }
    if (silent && !run.agentEnded && agents[2].hasExited()) run.agentEnded = seconds();
    std::this_thread::sleep_for(5ms);
  }
  return run;
}

std::optional<double> rendezvousOnce(const Options& o, bool torchrun, bool impaired) {
  HostNetwork net({.hosts = 4});
  if (impaired) net.impair(100, 20, 2);
  std::vector<Agent> agents;
  const auto start = Clock::now();
  for (int h = 0; h < 4; ++h) {
    agents.push_back(Agent{net.start(h,
                                     agentArgv(o, torchrun, net, h, "4", "join_timeout=120",
                                               {"/bin/sh", "-c", "echo worker started"}),
                                     agentEnv(net)),
                           ""});
  }
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.giveUp));
  for (auto& a : agents) {
    if (!a.waitFor("worker started", deadline)) return std::nullopt;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& a : agents) {
    while (!a.hasExited() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  }
  return elapsed;
}

std::optional<double> median(std::vector<std::optional<double>> values) {
  // A run where the event never came counts as the slowest.
  std::sort(values.begin(), values.end(), [](const auto& a, const auto& b) {
    if (!a || !b) return a.has_value() && !b.has_value();
    return *a < *b;
  });
  return values.empty() ? std::nullopt : values[values.size() / 2];
}

std::string cell(std::optional<double> seconds) {
  return seconds ? fmt::format("{:.2f} s", *seconds) : "-";
}
std::string ratio(std::optional<double> ours, std::optional<double> theirs, double giveUp) {
  if (!ours) return "";
  if (!theirs) return fmt::format("> {:.0f}x", giveUp / *ours);
  return fmt::format("{:.1f}x", *theirs / *ours);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ddprun-network-bench: node loss and a slow, lossy network, ddprun vs torchrun"};
  app.add_option("--repeat", o.repeat, "runs per case (median reported)")->capture_default_str();
  app.add_option("--give-up", o.giveUp, "seconds to wait for an event")->capture_default_str();
  app.add_option("--python", o.python, "the Python of the workers")->capture_default_str();
  app.add_option("--torchrun", o.torchrun, "torchrun of the same environment")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (const auto why = HostNetwork::unavailable()) {
    std::cerr << "ddprun-network-bench: cannot make hosts here: " << *why << "\n";
    return 1;
  }
  try {
    struct Row {
      std::string name;
      std::optional<double> ddprun;
      std::optional<double> torchrun;
    };
    std::vector<Row> rows;
    for (const bool silent : {true, false}) {
      std::vector<std::optional<double>> reformed[2];
      std::vector<std::optional<double>> ended[2];
      for (int r = 0; r < o.repeat; ++r) {
        for (const bool torchrun : {false, true}) {
          const auto run = detectOnce(o, torchrun, silent);
          std::cerr << fmt::format("{} {} run {}: re-formed {}, cut-off agent ended {}\n",
                                   torchrun ? "torchrun" : "ddprun", silent ? "cut off" : "killed",
                                   r + 1, cell(run.reformed), cell(run.agentEnded));
          reformed[torchrun].push_back(run.reformed);
          ended[torchrun].push_back(run.agentEnded);
        }
      }
      const std::string what = silent ? "host cut off" : "host killed";
      rows.push_back({what + ": others re-formed", median(reformed[0]), median(reformed[1])});
      if (silent) rows.push_back({what + ": its agent ends", median(ended[0]), median(ended[1])});
    }
    for (const bool impaired : {false, true}) {
      std::vector<std::optional<double>> times[2];
      for (int r = 0; r < o.repeat; ++r) {
        for (const bool torchrun : {false, true}) {
          const auto t = rendezvousOnce(o, torchrun, impaired);
          std::cerr << fmt::format("{} rendezvous of 4, {} network, run {}: {}\n",
                                   torchrun ? "torchrun" : "ddprun",
                                   impaired ? "impaired" : "clean", r + 1, cell(t));
          times[torchrun].push_back(t);
        }
      }
      rows.push_back({impaired ? "4 nodes rendezvous, 100 +- 20 ms, 2 % loss"
                               : "4 nodes rendezvous, clean network",
                      median(times[0]), median(times[1])});
    }
    std::cout << fmt::format("| case (median of {}) | ddprun | torchrun | ratio |\n", o.repeat)
              << "|---|---:|---:|---:|\n";
    for (const auto& row : rows) {
      std::cout << fmt::format("| {} | {} | {} | {} |\n", row.name, cell(row.ddprun),
                               cell(row.torchrun), ratio(row.ddprun, row.torchrun, o.giveUp));
    }
  } catch (const std::exception& e) {
    std::cerr << "ddprun-network-bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
