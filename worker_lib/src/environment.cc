#include "ddprun/worker/environment.h"

#include <fmt/format.h>

#include <limits>

#include "ddprun/common/env.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/slurm.h"

namespace ddprun::worker {

namespace {

using Vars = std::map<std::string, std::string>;

const std::string* find(const Vars& vars, const char* name) {
  auto it = vars.find(name);
  return it == vars.end() || it->second.empty() ? nullptr : &it->second;
}

int integer(const Vars& vars, const char* name, int fallback) {
  const std::string* text = find(vars, name);
  if (text == nullptr) return fallback;
  const auto value = parseInteger(*text);
  if (!value || *value < 0 || *value > std::numeric_limits<int>::max()) {
    throw ConfigError(
        fmt::format("{}={} is not a whole number of 0 or more; check how the job "
                    "was launched",
                    name, *text));
  }
  return static_cast<int>(*value);
}

void fromLauncher(const Vars& vars, Environment& e) {
  e.source =
      find(vars, env::kStorePort) ? Environment::Source::kDdprun : Environment::Source::kTorchrun;
  e.rank = integer(vars, env::kRank, 0);
  e.worldSize = integer(vars, env::kWorldSize, 1);
  e.localRank = integer(vars, env::kLocalRank, 0);
  e.localWorldSize = integer(vars, env::kLocalWorldSize, e.worldSize);
  e.nodeRank = integer(vars, env::kGroupRank, 0);
  e.restartCount = integer(vars, env::kRestartCount, 0);
  if (const auto* addr = find(vars, env::kMasterAddr)) e.masterAddr = *addr;
  e.masterPort = integer(vars, env::kMasterPort, 0);
  if (const auto* host = find(vars, env::kStoreHost)) e.storeHost = *host;
  e.storePort = integer(vars, env::kStorePort, 0);
  if (const auto* prefix = find(vars, env::kStorePrefix)) e.storePrefix = *prefix;
}

void fromSlurm(const SlurmJob& job, const Vars& vars, Environment& e) {
  e.source = Environment::Source::kSlurm;
  e.rank = job.procId;
  e.worldSize = job.ntasks;
  e.localRank = job.localId;
  e.localWorldSize = job.tasksOnThisNode().value_or(1);
  e.nodeRank = job.nodeRank;
  e.masterAddr = find(vars, env::kMasterAddr) ? *find(vars, env::kMasterAddr) : job.masterHost();
  e.masterPort = integer(vars, env::kMasterPort, slurmMasterPort(job.jobId));
}

void validate(const Environment& e) {
  if (e.worldSize < 1) {
    throw ConfigError(fmt::format("WORLD_SIZE={} must be at least 1", e.worldSize));
  }
  if (e.rank >= e.worldSize) {
    throw ConfigError(
        fmt::format("RANK={} is not below WORLD_SIZE={}; every rank must be in "
                    "0..WORLD_SIZE-1",
                    e.rank, e.worldSize));
  }
  if (e.localRank >= e.localWorldSize) {
    throw ConfigError(fmt::format("LOCAL_RANK={} is not below LOCAL_WORLD_SIZE={}", e.localRank,
                                  e.localWorldSize));
  }
  if (e.distributed && (e.masterAddr.empty() || e.masterPort == 0)) {
    throw ConfigError(
        "a distributed run needs MASTER_ADDR and MASTER_PORT; launch with ddprun (or torchrun), "
        "or set both");
  }
}

}  // namespace

Environment Environment::fromVariables(const Vars& vars, DistributedMode mode) {
  Environment e;
  if (mode == DistributedMode::kOff) return e;
  if (find(vars, env::kRank) && find(vars, env::kWorldSize)) {
    fromLauncher(vars, e);
  } else if (auto job = detectSlurm(vars)) {
    fromSlurm(*job, vars, e);
  } else if (mode == DistributedMode::kOn) {
    throw ConfigError(
        "distributed training was forced on, but neither RANK/WORLD_SIZE nor SLURM's variables "
        "are set; launch with ddprun --nproc_per_node=N");
  }
  e.distributed = mode == DistributedMode::kOn || e.worldSize > 1;
  if (const auto* token = find(vars, env::kToken)) e.token = *token;
  validate(e);
  return e;
}

Environment Environment::detect(DistributedMode mode) {
  return fromVariables(environmentMap(), mode);
}

int Environment::deviceIndex(int visibleDevices) const {
  if (visibleDevices <= 0) return -1;
  return localRank % visibleDevices;
}

std::string Environment::describe() const {
  const char* from = source == Source::kDdprun     ? "ddprun's variables"
                     : source == Source::kTorchrun ? "torchrun's variables"
                     : source == Source::kSlurm    ? "SLURM's variables"
                                                   : "no launcher (single process)";
  return fmt::format("rank {} of {} (local {} of {}, node {}), from {}", rank, worldSize, localRank,
                     localWorldSize, nodeRank, from);
}

}  // namespace ddprun::worker
