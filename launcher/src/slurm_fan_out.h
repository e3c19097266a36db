// One command in a Slurm batch script: `ddprun --nproc_per_node=2 train.py`
// run by the batch script itself (no srun) starts one ddprun per node of
// the allocation through srun, as mpirun and DeepSpeed's launcher fan out,
// with the settings a user would otherwise type: one task per node, the
// step ended when a task fails (--kill-on-bad-exit=1), every CPU the job
// has on a node for its task, and the job's id as the rendezvous id.
//
// Thread-safety: pure functions (fanOutCommand reads PATH through the
// caller's environment map).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch_options.h"

namespace ddprun::launcher {

// The srun command line to run instead of this ddprun, or nullopt when
// ddprun runs here itself: outside Slurm, inside a job step (srun), in a
// one-node allocation, with --standalone, or when --nnodes asks for one
// node. `self` is this executable's path, `args` its arguments (argv[1..]).
// Throws ConfigError when a fan-out is needed but srun is not on PATH.
std::optional<std::vector<std::string>> fanOutCommand(const LaunchOptions& options,
                                                      const std::map<std::string, std::string>& env,
                                                      const std::string& self,
                                                      const std::vector<std::string>& args);

}  // namespace ddprun::launcher
