// Environment: where this training process stands in the job.
//
// detect() reads, in order: ddprun's and torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ... plus DDPRUN_STORE_* when ddprun
// launched us); else SLURM's (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, the
// master address from the nodelist and the same per-job port rule as the
// launcher); else a single process. `mode` forces distributed on or off,
// like Lightning's use_distributed=True/False/None. Inconsistent values
// (rank >= world size, a missing master address, ...) throw ConfigError.
//
// Example:
//   auto env = ddprun::worker::Environment::detect();
//   int device = env.deviceIndex(visibleGpus);   // LOCAL_RANK-based, never RANK
//
// Thread-safety: a plain value; detect() reads the process environment.
#pragma once

#include <map>
#include <string>

namespace ddprun::worker {

enum class DistributedMode { kAuto, kOn, kOff };

struct Environment {
  enum class Source { kDdprun, kTorchrun, kSlurm, kSingleProcess };

  Source source = Source::kSingleProcess;
  bool distributed = false;
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 0;
  int restartCount = 0;
  // ddprun's native store (only when ddprun launched this process).
  std::string storeHost;
  int storePort = 0;
  std::string storePrefix;
  std::string token;

  static Environment detect(DistributedMode mode = DistributedMode::kAuto);
  static Environment fromVariables(const std::map<std::string, std::string>& variables,
                                   DistributedMode mode = DistributedMode::kAuto);

  // The CUDA device of this process among `visibleDevices`: the local rank
  // modulo the count, so several nodes never pick device RANK (QuantumGrav's
  // multi-node bug). -1 when there is no visible device.
  int deviceIndex(int visibleDevices) const;

  // "rank 3 of 8 (local 1 of 4, node 1), from torchrun's variables"
  std::string describe() const;
};

}  // namespace ddprun::worker
