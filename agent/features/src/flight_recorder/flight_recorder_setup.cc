#include "ddprun/agent/features/flight_recorder/flight_recorder_setup.h"

#include "ddprun/common/env.h"

namespace ddprun::agent {

void FlightRecorderSetup::contributeAttemptEnvironment(const Attempt& attempt, Environment& env) {
  const std::filesystem::path dir = dir_(attempt);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  const auto setUnlessGiven = [&env](const char* name, const char* newName, std::string value) {
    if (!env.contains(name) && !env.contains(newName)) env[name] = std::move(value);
  };
  setUnlessGiven(env::kFlightRecorderBuffer, env::kFlightRecorderBufferNew, "2000");
  setUnlessGiven(env::kFlightRecorderDumpOnTimeout, env::kFlightRecorderDumpOnTimeoutNew, "1");
  setUnlessGiven(env::kFlightRecorderDumpFile, env::kFlightRecorderDumpFileNew,
                 (dir / "rank_").string());
}

}  // namespace ddprun::agent
