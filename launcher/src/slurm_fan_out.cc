#include "slurm_fan_out.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "ddprun/common/error.h"
#include "ddprun/common/slurm.h"
#include "run_config.h"

namespace ddprun::launcher {
namespace {

// srun on PATH (from `env`), or "".
std::string findSrun(const std::map<std::string, std::string>& env) {
  const auto path = env.find("PATH");
  if (path == env.end()) return "";
  std::istringstream dirs(path->second);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/srun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::optional<std::vector<std::string>> fanOutCommand(const LaunchOptions& o,
                                                      const std::map<std::string, std::string>& env,
                                                      const std::string& self,
                                                      const std::vector<std::string>& args) {
  if (o.standalone) return std::nullopt;
  const auto job = detectSlurm(env);
  if (!job || job->inStep || job->nnodes < 2) return std::nullopt;
  if (o.isGiven("nnodes") && parseNnodes(o.nnodes).max < 2) return std::nullopt;
  const std::string srun = findSrun(env);
  if (srun.empty()) {
    throw ConfigError(fmt::format(
        "ddprun runs in the batch script of Slurm job {} ({} nodes, no job step) and would start "
        "one ddprun per node with srun, but srun is not on PATH; add Slurm's bin folder to PATH, "
        "start ddprun with `srun --ntasks-per-node=1 ddprun ...`, or give --nnodes=1 to run on "
        "this node only",
        job->jobId, job->nnodes));
  }
  const std::string nodes = std::to_string(job->nnodes);
  std::vector<std::string> command = {srun, "--nodes=" + nodes, "--ntasks=" + nodes,
                                      "--ntasks-per-node=1", "--kill-on-bad-exit=1"};
  // Slurm 22.05's srun no longer inherits the batch job's --cpus-per-task:
  // the one task of each node gets every CPU the job has there (the
  // smallest node's count, which every node can give).
  if (!job->cpusPerNode.empty()) {
    const int cpus = *std::min_element(job->cpusPerNode.begin(), job->cpusPerNode.end());
    if (cpus > 1) command.push_back("--cpus-per-task=" + std::to_string(cpus));
  }
  command.push_back(self);
  if (!o.isGiven("rdzv_id")) command.push_back("--rdzv_id=" + job->jobId);
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

}  // namespace ddprun::launcher
