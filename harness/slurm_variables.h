// What `srun` gives each task of a one-node job, plus the MASTER_ADDR and
// MASTER_PORT a batch script exports: for tests that start ranks the way a
// SLURM job without ddprun does.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ddprun::harness {

inline std::map<std::string, std::string> slurmVariables(int rank, int tasks, std::uint16_t port,
                                                         const std::string& jobId) {
  return {{"SLURM_JOB_ID", jobId},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_LOCALID", std::to_string(rank)},
          {"SLURM_NTASKS", std::to_string(tasks)},
          {"SLURM_NNODES", "1"},
          {"SLURM_NODEID", "0"},
          {"SLURM_JOB_NODELIST", "localhost"},
          {"SLURM_TASKS_PER_NODE", std::to_string(tasks)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

}  // namespace ddprun::harness
