// ChaosRun: runs one ChaosPlan on hosts made of network namespaces
// (harness/host_network.h): three ddprun agents, 2 workers each
// (tests/chaos/chaos_train.py, or chaos_train.cc on ddprun::worker), with
// ddprun-rendezvous or an etcd member per host where the plan's store needs
// them, each agent's --log_dir on a tmpfs where a disk-full fault needs
// one, and the plan's faults at their steps. A Slurm job step's plan
// (Store::kSlurm) runs on the nodes of a SlurmCluster instead: one sbatch
// job whose `srun` starts an agent on each node, as its user, under
// `ddprun-chaos --supervise` (chaos_process.h), whose files tell the
// harness each agent's pid, output and end. Then it
// checks the invariants and returns every violation, one line each:
//   - a survivable plan completes: rank 0 prints the undisturbed checksum,
//     and every agent exits 0 (those of hosts allowed to drop out may exit
//     with any code);
//   - any other plan ends (or completes as a survivable one would: its
//     workers may finish before the fault ends the job): every agent exits
//     within kEndBound of the fault
//     that ends it, at least one with a non-zero code, and each agent the
//     harness did not signal that exits non-zero says why on stderr
//     ("ddprun: error:" or a FAILED report) and in its error file
//     (TORCHELASTIC_ERROR_FILE);
//   - no ddprun (nor ddprun-rendezvous) dies of a signal the harness did not
//     send it;
//   - nothing is left running: no process in any host once the agents end
//     (on a Slurm cluster: no process of the job's user once Slurm ended
//     the job), no worker of any attempt;
//   - no run outlives kRunLimit.
//
// Thread-safety: one thread drives it.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "chaos_plan.h"

namespace ddprun::harness {
class SlurmCluster;
}

namespace ddprun::chaos {

inline constexpr std::chrono::seconds kEndBound{45};
inline constexpr std::chrono::seconds kRunLimit{180};

struct RunResult {
  std::vector<std::string> violations;
  std::string outcome;  // "completed", "ended (exit codes 1 1 143)", ...
  double seconds = 0;
};

// `folder`: the run's checkpoint, error files and logs (kept for a failed
// run, with each agent's output, agent-host<h>-<i>.{out,err}, and a copy of
// each tmpfs log directory). `verbose`: the agents' output goes to stderr as it comes.
// `slurm`: the cluster a Store::kSlurm plan runs on (kept from run to run).
RunResult runPlan(const Plan& plan, const std::filesystem::path& folder, bool verbose,
                  harness::SlurmCluster* slurm = nullptr);

}  // namespace ddprun::chaos
