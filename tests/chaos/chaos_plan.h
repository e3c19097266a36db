// ChaosPlan: what one seeded run of ddprun-chaos does: the job (how its
// store is served, static or elastic, the watchdog, which PyTorch) and 1 to 3
// faults, each at a training step, on a host; and what the job must then do:
// complete with the undisturbed checksum (every fault survivable, the hosts
// allowed to drop out named), or end within a bound.
//
// The plan is a pure function of the seed (std::mt19937_64, and drawing that
// does not depend on the library's distributions), so `--seed N` replays a
// run: the same job and the same faults at the same steps.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddprun::chaos {

inline constexpr int kHosts = 3;
inline constexpr int kWorkersPerHost = 2;
inline constexpr int kMaxRestarts = 3;
inline constexpr int kSteps = 40;

enum class Store {
  kStatic,  // --master_addr: node rank 0's agent serves the store
  kAgent,   // c10d, host 0's agent serves the store (is_host)
  kDaemon,  // c10d, a standalone ddprun-rendezvous on host 0
  kEtcd,    // etcd, one member on each host (the workers' store: group rank 0's agent)
  kSlurm,   // a Slurm job step (srun, the short form): node 0's agent serves the store
};

enum class FaultKind {
  kWorkerKill,         // SIGKILL of one worker
  kWorkerExit,         // one worker exits 1 (it is told through a file)
  kWorkerPause,        // SIGSTOP of one worker for 1 s, then SIGCONT
  kWorkerStop,         // SIGSTOP of one worker for good (the watchdog's job)
  kAgentKillRestart,   // SIGKILL of an agent, started again as a scheduler would
  kAgentPauseShort,    // SIGSTOP of an agent for 0.5 s (within the keep-alive bound)
  kAgentPauseLong,     // SIGSTOP of an agent for 6 s (past the bound), then SIGCONT
  kAgentTerm,          // SIGTERM to one agent
  kStoreHostKill,      // SIGKILL of the agent that serves the store
  kPartitionHeal,      // a host cut off for 0.5 s
  kPartitionCut,       // a host cut off for good
  kDaemonKillRestart,  // SIGKILL of ddprun-rendezvous, started again on its port
  kDiskFull,           // a host's --log_dir disk fills up, then one of its workers exits 1
  kEtcdMemberKill,     // SIGKILL of the etcd member on a host (etcd jobs; one a run)
  kCount
};

const char* kindName(FaultKind kind);
std::optional<FaultKind> kindNamed(const std::string& name);

enum class Program {
  kPython,     // chaos_train.py on the project's current PyTorch
  kPython113,  // chaos_train.py on Debian's PyTorch 1.13
  kCpp,        // chaos-train: the same training on ddprun::worker (LibTorch)
};

struct Job {
  Store store = Store::kAgent;
  bool elastic = false;   // --nnodes=2:3 (else 3 nodes)
  bool watchdog = false;  // --watchdog_timeout=3
  Program program = Program::kPython;
};

struct Fault {
  FaultKind kind = FaultKind::kWorkerKill;
  int host = 0;
  int worker = 0;  // of that host's workers (worker faults)
  int atStep = 1;  // fires once rank 0 reports this step (one fault a step)
};

struct Plan {
  std::uint64_t seed = 0;
  Job job;
  std::vector<Fault> faults;
  // Every fault survivable: the job completes with the checksum; the hosts
  // in `mayDrop` may leave it (with any exit but death by an unsent signal).
  bool survivable = true;
  std::set<int> mayDrop;
  // Else: the index of the fault after which the job must end.
  std::size_t endingFault = 0;
};

// The run of `seed`; with `only`, its faults are of that kind (and the job
// one where it applies), its program the seed's modulo 3 (consecutive
// seeds cover the three). With `slurm`, the job is a Slurm job step's
// (Store::kSlurm) and its faults only those that apply to one.
Plan drawPlan(std::uint64_t seed, std::optional<FaultKind> only = std::nullopt, bool slurm = false);

// Whether a fault of `kind` can happen to a Slurm job step: not a restart
// of an agent (a step's task never restarts), nor a daemon's or etcd's.
bool appliesToSlurm(FaultKind kind);

// Sets survivable, mayDrop and endingFault from the job and the faults (a
// run whose job finished before its last faults judges those that fired).
void classify(Plan& plan);

// "seed 7: c10d elastic, store on host 0's agent, PyTorch 2.x; faults:
// agent-term host 2 at step 12; ... -> completes (host 2 may drop)".
std::string describe(const Plan& plan);

// The checksum chaos_train.py prints when nothing disturbed it.
std::uint64_t undisturbedChecksum(int steps, int samples);

}  // namespace ddprun::chaos
