// RoundsSettings: the rounds room's slice of the agent's configuration:
// who this node is in the job, what it offers its workers as their store,
// and how it meets the other nodes (RendezvousConfig). The rounds room
// (NodeRendezvous, NodeRounds, RendezvousRounds) sees nothing else of
// AgentConfig; roundsSettingsOf cuts the slice.
//
// Thread-safety: a plain value.
#pragma once

#include <string>

#include "ddprun/agent/agent_config.h"

namespace ddprun::agent {

struct RoundsSettings {
  std::string runId;     // the rendezvous id: the job's keys live under it
  std::string hostname;  // part of this node's id in the rendezvous
  int nprocPerNode = 1;
  int maxRestarts = 0;  // the job's restart budget (the first join fixes it)
  // The workers' store: the agent's (useAgentStore), or worker rank 0's at
  // masterAddr:masterPort (0: a free port); strict: no token-less clients;
  // relayed: through this node's relay.
  bool useAgentStore = true;
  bool strictStore = false;
  bool relayWorkersStore = false;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;
  RendezvousConfig rendezvous;
};

inline RoundsSettings roundsSettingsOf(const AgentConfig& c) {
  return RoundsSettings{.runId = c.runId,
                        .hostname = c.hostname,
                        .nprocPerNode = c.nprocPerNode,
                        .maxRestarts = c.restarts.maxRestarts,
                        .useAgentStore = c.useAgentStore,
                        .strictStore = c.strictStore,
                        .relayWorkersStore = c.relayWorkersStore,
                        .masterAddr = c.masterAddr,
                        .masterPort = c.masterPort,
                        .rendezvous = c.rendezvous};
}

}  // namespace ddprun::agent
