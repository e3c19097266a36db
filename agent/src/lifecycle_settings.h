// The lifecycle's settings from the agent's configuration: restarts, the
// back-off (seeded at random per node), grace periods and the crash-loop
// stop. The root adds what it connects (the failure report, the exit).
#pragma once

#include <random>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/node_lifecycle.h"

namespace ddprun::agent {

inline LifecycleSettings lifecycleSettingsOf(const AgentConfig& config) {
  LifecycleSettings s;
  s.maxRestarts = config.maxRestarts;
  s.workersPerNode = config.nprocPerNode;
  s.shutdownTimeout = config.shutdownTimeout;
  s.survivorGrace = config.survivorGrace;
  s.backoff = {config.restartBackoff.initial, config.restartBackoff.max};
  s.backoffSeed = std::random_device{}();
  s.maxNoProgressRestarts = config.maxNoProgressRestarts;
  s.noRestartExitCode = config.noRestartExitCode;
  return s;
}

}  // namespace ddprun::agent
