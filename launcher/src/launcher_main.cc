#include "ddprun/launcher/launcher_main.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <vector>

#include "ddprun/agent/agent.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "launch_options.h"
#include "report/report_command.h"
#include "run_config.h"
#include "slurm_fan_out.h"
#include "status_command.h"

namespace ddprun::launcher {
namespace {

// In a Slurm batch script of several nodes: replaces this process with srun
// starting one ddprun per node (slurm_fan_out.h); returns only when this
// ddprun runs the job itself. Throws ConfigError.
void fanOutUnderSlurm(const LaunchOptions& options, int argc, char** argv, const char* name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto command = fanOutCommand(options, environmentMap(), ec ? argv[0] : self.string(),
                                     std::vector<std::string>(argv + 1, argv + argc));
  if (!command) return;
  std::cerr << fmt::format("{}: one {} per node of the Slurm allocation: {}\n", name, name,
                           fmt::join(*command, " "));
  std::vector<char*> raw;
  for (const auto& arg : *command) raw.push_back(const_cast<char*>(arg.c_str()));
  raw.push_back(nullptr);
  ::execv(raw[0], raw.data());
  throw ConfigError(fmt::format("cannot run {}: {}", (*command)[0], std::strerror(errno)));
}

}  // namespace

int launcherMain(int argc, char** argv, LauncherKind kind) {
  ::signal(SIGPIPE, SIG_IGN);
  // A log file over RLIMIT_FSIZE must fail the write (reported), not kill ddprun.
  ::signal(SIGXFSZ, SIG_IGN);
  const char* name = kind == LauncherKind::kLegacyLaunch ? "ddprun-launch" : "ddprun";
  if (kind == LauncherKind::kDdprun && argc > 1 && std::string_view(argv[1]) == "status") {
    return runStatusCommand(argc, argv);
  }
  if (kind == LauncherKind::kDdprun && argc > 1 && std::string_view(argv[1]) == "report") {
    return runReportCommand(argc, argv);
  }
  LaunchOptions options;
  options.legacyLaunch = kind == LauncherKind::kLegacyLaunch;
  if (const int code = parseCommandLine(argc, argv, options); code >= 0) return code;
  agent::AgentConfig config;
  try {
    fanOutUnderSlurm(options, argc, argv, name);
    std::string notices;
    config = buildAgentConfig(options, notices);
    std::cerr << notices;
  } catch (const ConfigError& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 2;
  }
  try {
    initLogging("ddprun");
    agent::Agent agent(std::move(config));
    return agent.run();
  } catch (const ConfigError& e) {
    // Found only when acting on it (e.g. node 0's --master_port is taken).
    std::cerr << name << ": error: " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ddprun::launcher
