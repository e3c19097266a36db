// LaunchOptions: ddprun's command line as given, before validation.
//
// Every option has torchrun's name in both spellings (--nproc_per_node and
// --nproc-per-node) and reads PET_<NAME> from the environment when the flag
// is absent (flag > PET_* > default). Values are kept as text so that
// buildAgentConfig() can say precisely what is wrong with them.
//
// Thread-safety: plain value; defineOptions() binds a CLI::App to it.
#pragma once

#include <CLI/CLI.hpp>

#include <set>
#include <string>
#include <vector>

namespace ddprun::launcher {

struct LaunchOptions {
  std::string nprocPerNode = "1";
  std::string nnodes = "1";
  std::string nodeRank = "0";
  std::string masterAddr = "127.0.0.1";
  std::string masterPort;  // empty: pick a free port
  bool standalone = false;
  std::string rdzvBackend = "static";
  std::string rdzvEndpoint;
  std::string rdzvId = "none";
  std::string rdzvConf;
  std::string maxRestarts = "0";
  std::string maxNoProgressRestarts = "3";
  std::string noRestartExitCode;  // empty: the failing worker's code
  std::string restartBackoffInitial = "1";
  std::string restartBackoffMax = "30";
  std::string watchdogTimeout = "0";
  std::string metricsPort;  // empty: no metrics endpoint
  std::string monitorInterval = "0.1";
  std::string role = "default";
  std::string logDir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string localRanksFilter;
  bool runPath = false;
  bool module = false;
  bool noPython = false;
  std::string preload;  // --preload MOD[,MOD...]
  std::string localAddr;
  std::string shutdownTimeout = "30";  // or TORCH_ELASTIC_SHUTDOWN_TIMEOUT
  std::string survivorGrace = "0.05";  // --survivor_grace
  std::string logPrefix = "[rank ${rank}]: ";
  std::string tty = "auto";  // --tty auto|always|never
  std::string startMethod = "spawn";
  std::string eventLogHandler = "null";
  std::string logsSpecs;
  std::string numaBinding;
  std::string signalsToHandle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";
  bool virtualLocalRank = false;
  std::string printCompletion;  // --print_completion SHELL (handled while parsing)
  std::string duplicateStdoutFilters;
  std::string duplicateStderrFilters;
  std::string workerStore = "agent";
  std::string storeRelay = "auto";
  bool strictStore = false;

  // ddprun-launch, the drop-in for `python -m torch.distributed.launch`:
  // the program gets --local-rank=N (--local_rank=N under PyTorch < 2.0)
  // before its own arguments unless --use_env is given.
  bool legacyLaunch = false;
  bool useEnv = false;

  // Options set by a flag or a PET_* variable (by their underscore name,
  // e.g. "nnodes"), so SLURM-derived values only fill the others.
  std::set<std::string> given;
  bool isGiven(const std::string& name) const { return given.contains(name); }

  // The program and its arguments, untouched.
  std::vector<std::string> program;
};

// Declares every option on `app`, bound to `options` (and --use_env when
// options.legacyLaunch is set).
void defineOptions(CLI::App& app, LaunchOptions& options);

// Parses argv. Returns the exit code to use when ddprun must stop now
// (0 after --help, 2 for a usage error, after printing the message), or -1
// to go on.
int parseCommandLine(int argc, char** argv, LaunchOptions& options);

}  // namespace ddprun::launcher
