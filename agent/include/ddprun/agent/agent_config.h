// AgentConfig: everything one node's agent needs to run its workers. The
// launcher builds it from the command line; it is immutable afterwards.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/std_spec.h"

namespace ddprun::agent {

struct AgentConfig {
  // The worker's argv: command[0] is an absolute path to an executable. The
  // literal "${local_rank}" in any argument is replaced per worker.
  std::vector<std::string> command;
  // A short name for the program, for reports ("train.py").
  std::string programName;

  int nprocPerNode = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string role = "default";
  std::string runId;
  std::string hostname;
  // MASTER_ADDR / MASTER_PORT given to workers (worker rank 0 hosts the
  // TCPStore of init_process_group there). Port 0: pick a free one.
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;

  int maxRestarts = 0;
  // SIGTERM to SIGKILL grace when stopping workers.
  std::chrono::milliseconds shutdownTimeout{std::chrono::seconds(30)};

  // Logs. Without logDir, files needed by redirects/tee and error files go
  // to a temporary run directory removed at exit.
  std::optional<std::filesystem::path> logDir;
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> localRanksFilter;  // console shows only these
  // Console line prefix; ${rank}, ${local_rank}, ${role_name}, ${node_rank}
  // and ${hostname} are substituted. Empty: no prefix.
  std::string logPrefixTemplate = "[rank ${rank}]: ";

  // Extra environment set for every worker (after torchrun's variables are
  // computed, so these win). Used for OMP_NUM_THREADS and the like.
  std::map<std::string, std::string> extraEnv;
};

}  // namespace ddprun::agent
