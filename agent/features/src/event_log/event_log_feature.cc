#include "ddprun/agent/features/event_log/event_log_feature.h"

#include <chrono>

namespace ddprun::agent {

EventLogFeature::EventLogFeature(Settings settings, const std::filesystem::path& runDirectory)
    : settings_(std::move(settings)),
      log_(settings_.handler),
      runLog_(EventLogConfig{EventLogConfig::Kind::kFile, runDirectory / "events.jsonl"}) {}

void EventLogFeature::record(const std::string& name, const std::string& source,
                             std::map<std::string, std::string> metadata) {
  metadata.emplace("run_id", settings_.runId);
  metadata.emplace("hostname", settings_.hostname);
  log_.record(name, source, metadata);
  runLog_.record(name, source, metadata);
}

void EventLogFeature::workerEvent(const WorkerEvent& event) {
  record("torchelastic.worker.status." + event.state, "WORKER",
         {{"global_rank", std::to_string(event.rank)},
          {"group_rank", std::to_string(event.groupRank)},
          {"local_rank", std::to_string(event.localRank)},
          {"worker_id", std::to_string(event.pid)},
          {"role", settings_.role},
          {"state", event.state},
          {"rdzv_backend", settings_.rdzvBackend},
          {"raw_error", event.rawError},
          {"exit_code", event.exitCode ? std::to_string(*event.exitCode) : std::string()},
          {"agent_restarts", std::to_string(event.restartCount)}});
}

void EventLogFeature::roundAssigned(const rendezvous::protocol::Assignment& assigned) {
  // torchelastic 2.4+ times the rendezvous too (duration_ms).
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - joinedAt_);
  record("torchelastic.agent.RENDEZVOUS", "AGENT",
         {{"round", std::to_string(assigned.round)},
          {"duration_ms", std::to_string(took.count())},
          {"group_rank", std::to_string(assigned.groupRank)},
          {"group_world_size", std::to_string(assigned.groupWorldSize)},
          {"world_size", std::to_string(assigned.worldSize)}});
}

void EventLogFeature::restarting(const RestartNote& note) {
  const bool spent = note.restarts >= 0;
  record("torchelastic.agent.RESTART", "AGENT",
         {{"round", std::to_string(note.round)},
          {"restart", spent ? std::to_string(note.restarts) : std::string()},
          {"max_restarts", std::to_string(settings_.maxRestarts)},
          {"exit_code", spent ? std::to_string(note.failedCode) : std::string()},
          {"reason", note.reason.empty() ? "a worker of this node failed" : note.reason}});
}

void EventLogFeature::exiting(const NodeExit& exit) {
  record(
      exit.code == 0 ? "torchelastic.agent.status.SUCCEEDED" : "torchelastic.agent.status.FAILED",
      "AGENT",
      {{"exit_code", std::to_string(exit.code)},
       {"agent_restarts", std::to_string(exit.restartCount)}});
}

}  // namespace ddprun::agent
