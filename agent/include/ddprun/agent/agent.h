// Agent: runs one node's worker group to completion.
//
// It hosts the rendezvous store in-process on 127.0.0.1 (OS-assigned port,
// fresh random token), spawns the workers with torchrun's environment, waits
// on events only (process exits, output pipes, signals), stops and restarts
// the group on a failure while restarts remain, and finally prints the
// root-cause report. run() returns the exit code ddprun should exit with:
// 0, the root cause's exit code (128+N for signal N), or 128+N when ddprun
// itself received signal N.
//
// No worker, and no process in a worker's process group, outlives the
// agent: every exit path kills the groups, and a guardian process kills them
// if the agent is SIGKILLed.
//
// Thread-safety: run() once, from one thread.
#pragma once

#include <memory>

#include "ddprun/agent/agent_config.h"

namespace ddprun::agent {

class Agent {
 public:
  explicit Agent(AgentConfig config);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::agent
