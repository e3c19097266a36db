#include "ddprun/agent/features/event_log_feature.h"

namespace ddprun::agent {

EventLogFeature::EventLogFeature(const AgentConfig& config)
    : config_(config), log_(config.eventLog) {}

void EventLogFeature::worker(const WorkerEvent& event) {
  if (!log_.enabled()) return;
  const auto& r = config_.rendezvous;
  const char* backend = r.backend == RendezvousBackendKind::kEtcd ? "etcd"
                        : r.mode == RendezvousMode::kDynamic      ? "c10d"
                                                                  : "static";
  log_.record("torchelastic.worker.status." + event.state, "WORKER",
              {{"run_id", config_.runId},
               {"global_rank", std::to_string(event.rank)},
               {"group_rank", std::to_string(event.groupRank)},
               {"local_rank", std::to_string(event.localRank)},
               {"worker_id", std::to_string(event.pid)},
               {"role", config_.role},
               {"hostname", config_.hostname},
               {"state", event.state},
               {"rdzv_backend", backend},
               {"raw_error", event.rawError},
               {"exit_code", event.exitCode ? std::to_string(*event.exitCode) : std::string()},
               {"agent_restarts", std::to_string(event.restartCount)}});
}

void EventLogFeature::roundAssigned(const rendezvous::protocol::Assignment& assigned) {
  if (!log_.enabled()) return;
  log_.record("torchelastic.agent.RENDEZVOUS", "AGENT",
              {{"run_id", config_.runId},
               {"hostname", config_.hostname},
               {"round", std::to_string(assigned.round)},
               {"group_rank", std::to_string(assigned.groupRank)},
               {"group_world_size", std::to_string(assigned.groupWorldSize)},
               {"world_size", std::to_string(assigned.worldSize)}});
}

void EventLogFeature::restarting(const RestartNote& note) {
  if (!log_.enabled()) return;
  const bool spent = note.restarts >= 0;
  log_.record("torchelastic.agent.RESTART", "AGENT",
              {{"run_id", config_.runId},
               {"hostname", config_.hostname},
               {"round", std::to_string(note.round)},
               {"restart", spent ? std::to_string(note.restarts) : std::string()},
               {"max_restarts", std::to_string(config_.maxRestarts)},
               {"exit_code", spent ? std::to_string(note.failedCode) : std::string()},
               {"reason", note.reason.empty() ? "a worker of this node failed" : note.reason}});
}

void EventLogFeature::exiting(const NodeExit& exit) {
  if (!log_.enabled()) return;
  log_.record(
      exit.code == 0 ? "torchelastic.agent.status.SUCCEEDED" : "torchelastic.agent.status.FAILED",
      "AGENT",
      {{"run_id", config_.runId},
       {"hostname", config_.hostname},
       {"exit_code", std::to_string(exit.code)},
       {"agent_restarts", std::to_string(exit.restartCount)}});
}

}  // namespace ddprun::agent
