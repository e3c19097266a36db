// The environment of one worker: the agent's own environment plus
// torchrun's variables and ddprun's (docs/env.md).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/agent/workers/workers_settings.h"

namespace ddprun::agent {

// What varies per attempt and per worker.
struct WorkerIdentity {
  int localRank = 0;
  int rank = 0;
  int worldSize = 1;
  int groupRank = 0;
  int groupWorldSize = 1;
  int restartCount = 0;
  std::string masterAddr;
  int masterPort = 0;
  bool useAgentStore = false;
  std::string storeHost;
  int storePort = 0;
  std::string storePrefix;
  std::string errorFile;
  std::string token;
  // The interface of this node's rendezvous address ("": leave Gloo and
  // NCCL to choose); variables the user set win.
  std::string socketInterface;
};

// Returns "KEY=VALUE" entries: `base` (usually the agent's environ) with
// torchrun's and ddprun's variables set for `id`, then settings.extraEnv.
std::vector<std::string> buildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkersSettings& config, const WorkerIdentity& id);

// `text` with every occurrence of `macro` replaced by `value`.
std::string replaceAll(std::string text, std::string_view macro, std::string_view value);

// Replaces every "${local_rank}" in the arguments (torchrun's macro).
std::vector<std::string> substituteLocalRank(const std::vector<std::string>& argv, int localRank);

}  // namespace ddprun::agent
