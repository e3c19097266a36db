#include "chaos_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <random>

namespace ddprun::chaos {

namespace {

constexpr std::array<const char*, static_cast<int>(FaultKind::kCount)> kNames = {
    "worker-kill",        "worker-exit",       "worker-pause",     "worker-stop",
    "agent-kill-restart", "agent-pause-short", "agent-pause-long", "agent-term",
    "store-host-kill",    "partition-heal",    "partition-cut",    "daemon-kill-restart",
    "disk-full",          "etcd-member-kill"};

// Uniform in [0, n): the same on every standard library (the distributions
// are not specified bit for bit).
int below(std::mt19937_64& random, int n) { return static_cast<int>(random() % n); }

}  // namespace

bool appliesToSlurm(FaultKind kind) {
  return kind != FaultKind::kAgentKillRestart && kind != FaultKind::kDaemonKillRestart &&
         kind != FaultKind::kEtcdMemberKill;
}

namespace {

bool applies(FaultKind kind, const Job& job) {
  if (job.store == Store::kSlurm && !appliesToSlurm(kind)) return false;
  switch (kind) {
    case FaultKind::kWorkerStop:
      return job.watchdog;
    case FaultKind::kStoreHostKill:
      return job.store == Store::kStatic || job.store == Store::kAgent ||
             job.store == Store::kSlurm;
    case FaultKind::kDaemonKillRestart:
      return job.store == Store::kDaemon;
    case FaultKind::kEtcdMemberKill:
      return job.store == Store::kEtcd;
    default:
      return true;
  }
}

// The job a fault of `kind` needs (a seeded one otherwise).
Job jobFor(FaultKind kind, Job job) {
  if (kind == FaultKind::kWorkerStop) job.watchdog = true;
  if (kind == FaultKind::kStoreHostKill && job.store != Store::kStatic &&
      job.store != Store::kSlurm) {
    job.store = Store::kAgent;
  }
  if (kind == FaultKind::kDaemonKillRestart) job.store = Store::kDaemon;
  if (kind == FaultKind::kEtcdMemberKill) job.store = Store::kEtcd;
  if (job.store == Store::kStatic || job.store == Store::kSlurm) job.elastic = false;
  return job;
}

// The host whose agent serves the store (-1: a daemon or etcd does).
int storeAgentHost(const Job& job) {
  return job.store == Store::kDaemon || job.store == Store::kEtcd ? -1 : 0;
}

// Faults that take an etcd member away for good (a partition cuts its
// host's member off): one a run keeps etcd's quorum (2 of 3).
bool takesAnEtcdMember(FaultKind kind) {
  return kind == FaultKind::kEtcdMemberKill || kind == FaultKind::kPartitionCut;
}

}  // namespace

void classify(Plan& plan) {
  plan.survivable = true;
  plan.mayDrop.clear();
  plan.endingFault = 0;
  int restarts = 0;
  std::set<int> dropped;
  const int spareNodes = plan.job.elastic ? 1 : 0;  // 2:3
  const auto end = [&plan](std::size_t index) {
    if (!plan.survivable) return;
    plan.survivable = false;
    plan.endingFault = index;
  };
  for (std::size_t i = 0; i < plan.faults.size(); ++i) {
    const Fault& f = plan.faults[i];
    const bool storeHost = f.host == storeAgentHost(plan.job);
    switch (f.kind) {
      case FaultKind::kWorkerKill:
      case FaultKind::kWorkerExit:
      case FaultKind::kWorkerStop:
      case FaultKind::kDiskFull:  // the restart's files cannot be written; training goes on
        if (++restarts > kMaxRestarts) end(i);
        break;
      case FaultKind::kWorkerPause:
      case FaultKind::kAgentPauseShort:
      case FaultKind::kPartitionHeal:
        break;
      case FaultKind::kAgentKillRestart:
        if (storeHost) end(i);
        break;
      case FaultKind::kAgentPauseLong:
      case FaultKind::kAgentTerm:
      case FaultKind::kPartitionCut:
        // The daemon runs on host 0 too: cut off, it is the store's loss.
        if (storeHost || (f.kind == FaultKind::kPartitionCut && f.host == 0 &&
                          plan.job.store == Store::kDaemon)) {
          end(i);
        } else if (static_cast<int>(dropped.size()) < spareNodes) {
          dropped.insert(f.host);
          plan.mayDrop.insert(f.host);
        } else {
          end(i);
        }
        break;
      case FaultKind::kStoreHostKill:
      case FaultKind::kDaemonKillRestart:
        end(i);
        break;
      case FaultKind::kEtcdMemberKill:  // 2 of 3 members keep the quorum
        break;
      case FaultKind::kCount:
        break;
    }
  }
}

const char* kindName(FaultKind kind) { return kNames.at(static_cast<int>(kind)); }

std::optional<FaultKind> kindNamed(const std::string& name) {
  for (int k = 0; k < static_cast<int>(FaultKind::kCount); ++k) {
    if (name == kNames.at(k)) return static_cast<FaultKind>(k);
  }
  return std::nullopt;
}

Plan drawPlan(std::uint64_t seed, std::optional<FaultKind> only, bool slurm) {
  std::mt19937_64 random(seed);
  Plan plan;
  plan.seed = seed;
  plan.job.store = static_cast<Store>(below(random, 4));
  plan.job.elastic = below(random, 2) == 1;
  plan.job.watchdog = below(random, 2) == 1;
  const int program = below(random, 4);  // a half on the current PyTorch
  plan.job.program = program == 0   ? Program::kPython113
                     : program == 1 ? Program::kCpp
                                    : Program::kPython;
  // A run of one kind (--kind, --each-kind): the seed picks the program, so
  // consecutive seeds cover all three.
  if (only) plan.job.program = static_cast<Program>(seed % 3);
#ifndef DDPRUN_CHAOS_CPP_WORKER  // a build without LibTorch has no chaos-train
  if (plan.job.program == Program::kCpp) plan.job.program = Program::kPython;
#endif
  if (slurm) plan.job.store = Store::kSlurm;
  if (only) plan.job = jobFor(*only, plan.job);
  if (plan.job.store == Store::kStatic || plan.job.store == Store::kSlurm) plan.job.elastic = false;
  const int count = only ? 1 : 1 + below(random, 3);
  std::vector<int> steps;
  for (int i = 0; i < count; ++i) steps.push_back(3 + below(random, kSteps - 10));
  std::sort(steps.begin(), steps.end());
  // One fault per step: the job holds at each fault's step until it fired.
  for (std::size_t i = 1; i < steps.size(); ++i) steps[i] = std::max(steps[i], steps[i - 1] + 1);
  std::set<int> gone;  // hosts a fault took out for good: no later fault there
  for (int i = 0; i < count; ++i) {
    Fault f;
    do {
      f.kind =
          only ? *only : static_cast<FaultKind>(below(random, static_cast<int>(FaultKind::kCount)));
    } while (!applies(f.kind, plan.job) ||
             (plan.job.store == Store::kEtcd && takesAnEtcdMember(f.kind) && !only &&
              std::any_of(plan.faults.begin(), plan.faults.end(),
                          [](const Fault& e) { return takesAnEtcdMember(e.kind); })));
    do {
      f.host = below(random, kHosts);
    } while (gone.contains(f.host));
    if (f.kind == FaultKind::kStoreHostKill) f.host = 0;
    if (f.kind == FaultKind::kDaemonKillRestart) f.host = 0;
    f.worker = below(random, kWorkersPerHost);
    f.atStep = steps[i];
    if (f.kind == FaultKind::kAgentTerm || f.kind == FaultKind::kPartitionCut ||
        f.kind == FaultKind::kAgentPauseLong || f.kind == FaultKind::kStoreHostKill) {
      gone.insert(f.host);
    }
    plan.faults.push_back(f);
    if (static_cast<int>(gone.size()) >= kHosts - 1) break;
  }
  classify(plan);
  return plan;
}

std::string describe(const Plan& plan) {
  const char* store = plan.job.store == Store::kStatic   ? "static, store on node rank 0's agent"
                      : plan.job.store == Store::kAgent  ? "c10d, store on host 0's agent"
                      : plan.job.store == Store::kDaemon ? "c10d, store on ddprun-rendezvous"
                      : plan.job.store == Store::kSlurm  ? "Slurm step, store on node 0's agent"
                                                         : "etcd, a member on each host";
  std::string text = fmt::format("seed {}: {}{}{}, {}; faults:", plan.seed, store,
                                 plan.job.elastic ? ", elastic 2:3" : ", 3 nodes",
                                 plan.job.watchdog ? ", watchdog" : "",
                                 plan.job.program == Program::kPython113 ? "PyTorch 1.13"
                                 : plan.job.program == Program::kCpp     ? "C++ (ddprun::worker)"
                                                                         : "PyTorch current");
  for (const auto& f : plan.faults) {
    text += fmt::format(" {} host {}{} at step {};", kindName(f.kind), f.host,
                        f.kind <= FaultKind::kWorkerStop || f.kind == FaultKind::kDiskFull
                            ? fmt::format(" worker {}", f.worker)
                            : std::string(),
                        f.atStep);
  }
  if (plan.survivable) {
    text += " -> completes";
    for (int host : plan.mayDrop) text += fmt::format(" (host {} may drop)", host);
  } else {
    text += fmt::format(" -> ends after fault {}", plan.endingFault + 1);
  }
  return text;
}

std::uint64_t undisturbedChecksum(int steps, int samples) {
  __extension__ using Wide = unsigned __int128;  // products up to 2^124
  constexpr std::uint64_t kModulus = (std::uint64_t{1} << 61) - 1;
  constexpr std::uint64_t kMultiplier = 6364136223846793005ULL;
  std::uint64_t state = 1;
  for (int step = 0; step < steps; ++step) {
    std::uint64_t total = 0;
    for (int i = 0; i < samples; ++i) {
      total += static_cast<std::uint64_t>((Wide(state) * 31 + Wide(i) * 7 + Wide(step)) % 1000003);
    }
    state = static_cast<std::uint64_t>((Wide(state) * kMultiplier + total) % kModulus);
  }
  return state;
}

}  // namespace ddprun::chaos
