// ddprun: the command-line entry point. Parses the options, builds the
// agent's configuration and runs the agent; the exit code is the agent's
// (0, the root cause's code, or 128+N after signal N), or 2 for bad input.
#include <signal.h>

#include <iostream>
#include <string_view>

#include "ddprun/agent/agent.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "launch_options.h"
#include "run_config.h"
#include "status_command.h"

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  // A log file over RLIMIT_FSIZE must fail the write (reported), not kill ddprun.
  ::signal(SIGXFSZ, SIG_IGN);
  if (argc > 1 && std::string_view(argv[1]) == "status") {
    return ddprun::launcher::runStatusCommand(argc, argv);
  }
  ddprun::launcher::LaunchOptions options;
  if (const int code = ddprun::launcher::parseCommandLine(argc, argv, options); code >= 0) {
    return code;
  }
  ddprun::agent::AgentConfig config;
  try {
    std::string notices;
    config = ddprun::launcher::buildAgentConfig(options, notices);
    std::cerr << notices;
  } catch (const ddprun::ConfigError& e) {
    std::cerr << "ddprun: error: " << e.what() << "\n";
    return 2;
  }
  try {
    ddprun::initLogging("ddprun");
    ddprun::agent::Agent agent(std::move(config));
    return agent.run();
  } catch (const ddprun::ConfigError& e) {
    // Found only when acting on it (e.g. node 0's --master_port is taken).
    std::cerr << "ddprun: error: " << e.what() << "\n";
    return 2;
  } catch (const ddprun::Error& e) {
    std::cerr << "ddprun: error: " << e.what() << "\n";
    return 1;
  }
}
