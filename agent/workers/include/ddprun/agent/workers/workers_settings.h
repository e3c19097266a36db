// WorkersSettings: the workers room's slice of the agent's configuration:
// what to run, the environment torchrun's contract gives each worker, where
// their output goes, and how they are stopped. WorkerGroup, its runner and
// buildWorkerEnv see nothing else of AgentConfig; workersSettingsOf cuts the
// slice (the lifecycle's and the zygote's slices are lifecycleSettingsOf and
// zygoteSettings).
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/agent_config.h"

namespace ddprun::agent {

struct WorkersSettings {
  // What runs: argv with "${local_rank}" replaced per worker.
  std::vector<std::string> command;
  int nprocPerNode = 1;
  // torchrun's variables (docs/env.md).
  std::string role = "default";
  std::string runId;
  std::string hostname;
  int maxRestarts = 0;
  bool useAgentStore = true;  // TORCHELASTIC_USE_AGENT_STORE
  std::string ncclAsyncErrorHandlingName = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
  std::string signalsToHandle;  // TORCHELASTIC_SIGNALS_TO_HANDLE, "" if none
  bool virtualLocalRank = false;
  std::map<std::string, std::string> extraEnv;  // set last: these win
  // Output: OutputConfig's fields that the workers' streams need.
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> localRanksFilter;
  std::string logPrefixTemplate = "[rank ${rank}]: ";
  std::vector<std::string> duplicateStdoutFilters;
  std::vector<std::string> duplicateStderrFilters;
  // Stopping (StopConfig's): SIGTERM to SIGKILL, and a failed worker's survivors' grace.
  std::chrono::milliseconds shutdownTimeout{std::chrono::seconds(30)};
  std::chrono::milliseconds survivorGrace{50};
};

inline WorkersSettings workersSettingsOf(const AgentConfig& c) {
  return WorkersSettings{.command = c.command,
                         .nprocPerNode = c.nprocPerNode,
                         .role = c.role,
                         .runId = c.runId,
                         .hostname = c.hostname,
                         .maxRestarts = c.restarts.maxRestarts,
                         .useAgentStore = c.useAgentStore,
                         .ncclAsyncErrorHandlingName = c.ncclAsyncErrorHandlingName,
                         .signalsToHandle = c.stopping.signalsToHandle,
                         .virtualLocalRank = c.virtualLocalRank,
                         .extraEnv = c.extraEnv,
                         .redirects = c.output.redirects,
                         .tee = c.output.tee,
                         .localRanksFilter = c.output.localRanksFilter,
                         .logPrefixTemplate = c.output.logPrefixTemplate,
                         .duplicateStdoutFilters = c.output.duplicateStdoutFilters,
                         .duplicateStderrFilters = c.output.duplicateStderrFilters,
                         .shutdownTimeout = c.stopping.shutdownTimeout,
                         .survivorGrace = c.stopping.survivorGrace};
}

}  // namespace ddprun::agent
