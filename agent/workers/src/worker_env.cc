#include "ddprun/agent/workers/worker_env.h"

#include <fmt/format.h>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::agent {

std::vector<std::string> buildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkersSettings& config, const WorkerIdentity& id) {
  std::map<std::string, std::string> env = base;
  const int localWorldSize = config.nprocPerNode;
  env[env::kRank] = std::to_string(id.rank);
  env[env::kLocalRank] = std::to_string(id.localRank);
  env[env::kGroupRank] = std::to_string(id.groupRank);
  env[env::kRoleRank] = std::to_string(id.rank);
  env[env::kRoleName] = config.role;
  env[env::kLocalWorldSize] = std::to_string(localWorldSize);
  env[env::kWorldSize] = std::to_string(id.worldSize);
  env[env::kGroupWorldSize] = std::to_string(id.groupWorldSize);
  env[env::kRoleWorldSize] = std::to_string(id.worldSize);
  env[env::kMasterAddr] = id.masterAddr;
  env[env::kMasterPort] = std::to_string(id.masterPort);
  env[env::kRestartCount] = std::to_string(id.restartCount);
  env[env::kMaxRestarts] = std::to_string(config.maxRestarts);
  env[env::kRunId] = config.runId;
  // True: MASTER_ADDR:PORT is the agent's store, which PyTorch clients use
  // directly. False: worker rank 0 hosts its own TCPStore there.
  env[env::kUseAgentStore] = id.useAgentStore ? "True" : "False";
  env[env::kErrorFile] = id.errorFile;
  // Always set, as torchrun does (to 1 unless the user chose a value), under
  // the one name this PyTorch reads (2.x warns about the old one). A value
  // the user gave under either name is kept: torchrun 2.x adds 1 under the
  // new name over a legacy NCCL_ASYNC_ERROR_HANDLING=0, which then loses.
  if (const auto& name = config.ncclAsyncErrorHandlingName; !name.empty()) {
    const auto given = [&](const char* key) -> const std::string* {
      auto it = base.find(key);
      return it == base.end() ? nullptr : &it->second;
    };
    const std::string* value = given(name.c_str());
    if (value == nullptr) {
      value = given(name == env::kNcclAsyncErrorHandling ? env::kNcclAsyncErrorHandlingOld
                                                         : env::kNcclAsyncErrorHandling);
    }
    env[name] = value != nullptr ? *value : "1";
  }
  if (!config.signalsToHandle.empty()) env[env::kSignalsToHandle] = config.signalsToHandle;
  if (config.virtualLocalRank) {
    // torchrun 2.x: every worker sees only its own device, as device 0.
    env[env::kLocalRank] = "0";
    if (auto visible = base.find(env::kCudaVisibleDevices); visible != base.end()) {
      const auto devices = splitList(visible->second);
      if (id.localRank >= static_cast<int>(devices.size())) {
        throw Error(fmt::format(
            "--virtual_local_rank: local rank {} has no device in CUDA_VISIBLE_DEVICES={} ({} "
            "listed); list one device per worker or lower --nproc_per_node",
            id.localRank, visible->second, devices.size()));
      }
      // Entries are stripped, as torchrun 2.14 does ("0, 1" is 0 and 1).
      env[env::kCudaVisibleDevices] =
          std::string(trimSpaces(devices[static_cast<std::size_t>(id.localRank)]));
    } else {
      env[env::kCudaVisibleDevices] = std::to_string(id.localRank);
    }
  }
  env[env::kStoreHost] = id.storeHost;
  env[env::kStorePort] = std::to_string(id.storePort);
  env[env::kStorePrefix] = id.storePrefix;
  env[env::kToken] = id.token;
  env[env::kHostname] = config.hostname;
  if (!id.socketInterface.empty()) {
    env.try_emplace(env::kGlooSocketIfname, id.socketInterface);
    env.try_emplace(env::kNcclSocketIfname, "=" + id.socketInterface);  // "=": exactly this one
  }
  for (const auto& [name, value] : config.extraEnv) env[name] = value;

  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

std::string replaceAll(std::string text, std::string_view macro, std::string_view value) {
  for (std::size_t pos = text.find(macro); pos != std::string::npos;
       pos = text.find(macro, pos + value.size())) {
    text.replace(pos, macro.size(), value);
  }
  return text;
}

std::vector<std::string> substituteLocalRank(const std::vector<std::string>& argv, int localRank) {
  const std::string value = std::to_string(localRank);
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (const auto& arg : argv) out.push_back(replaceAll(arg, "${local_rank}", value));
  return out;
}

}  // namespace ddprun::agent
