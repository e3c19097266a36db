// Turning the command line into the agent's configuration: every value is
// parsed and checked here, and any problem becomes one ConfigError whose
// message names the option, what is wrong and what to do.
//
// Thread-safety: pure functions (they read the environment and PATH).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "ddprun/agent/agent_config.h"
#include "launch_options.h"

namespace ddprun::launcher {

struct NodeRange {
  int min = 1;
  int max = 1;
};

// --shutdown_timeout's default under Slurm (SLURM_JOB_ID set): well inside
// Slurm's default KillWait of 30 s, so that ddprun's SIGKILL, report and
// error file come before Slurm's SIGKILL (docs/multinode.md).
inline constexpr std::chrono::milliseconds kSlurmShutdownTimeout{20'000};

// Throws ConfigError. `notices` receives lines to print before starting
// (for example torchrun's OMP_NUM_THREADS banner).
agent::AgentConfig buildAgentConfig(const LaunchOptions& options, std::string& notices);

// Exposed for tests.
int parseNproc(const std::string& text);
NodeRange parseNnodes(const std::string& text);
// Finds `name` on PATH (or checks it when it contains '/'); throws ConfigError.
std::string resolveExecutable(const std::string& name, const std::string& what);

}  // namespace ddprun::launcher
