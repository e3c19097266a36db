// EventLogFeature (--event_log_handler): owns the EventLog and records, as
// torchelastic's events, each worker's start and end (WorkerEvent, from the
// workers' room), each round this node is assigned
// (torchelastic.agent.RENDEZVOUS), each restart (torchelastic.agent.RESTART)
// and the node's end (torchelastic.agent.status.SUCCEEDED/FAILED). Nothing
// is formatted when the handler is "null".
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/worker_event.h"
#include "ddprun/agent/features/event_log.h"
#include "ddprun/rendezvous/protocol.h"

namespace ddprun::agent {

class EventLogFeature : public LifecycleHook {
 public:
  // Throws ddprun::Error when the log's file cannot be opened.
  explicit EventLogFeature(const AgentConfig& config);

  void worker(const WorkerEvent& event);
  void roundAssigned(const rendezvous::protocol::Assignment& assigned);
  void restarting(const RestartNote& note) override;
  void exiting(const NodeExit& exit) override;

 private:
  const AgentConfig& config_;
  EventLog log_;
};

}  // namespace ddprun::agent
