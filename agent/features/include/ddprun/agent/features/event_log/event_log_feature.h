// EventLogFeature (--event_log_handler): owns the EventLog and records, as
// torchelastic's events, each worker's start and end (WorkerEvent, from the
// workers' room), each round this node is assigned
// (torchelastic.agent.RENDEZVOUS), each restart (torchelastic.agent.RESTART)
// and the node's end (torchelastic.agent.status.SUCCEEDED/FAILED), and
// other features' events (record). They also go to the run directory's
// events.jsonl, whatever the handler.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/event_log/event_log.h"
#include "ddprun/rendezvous/protocol.h"

namespace ddprun::agent {

class EventLogFeature : public Feature, public EventRecorder {
 public:
  // Writes to the user's log (--event_log_handler) and always to
  // `runDirectory`/events.jsonl (what `ddprun report` reads). Throws
  // ddprun::Error when a log's file cannot be opened.
  struct Settings {
    EventLogConfig handler;  // --event_log_handler
    std::string runId;
    std::string hostname;
    std::string role;
    std::string rdzvBackend;  // torchelastic's name: "static", "c10d" or "etcd"
    int maxRestarts = 0;
  };
  EventLogFeature(Settings settings, const std::filesystem::path& runDirectory);

  // One event, with run_id and hostname added to `metadata`.
  void record(const std::string& name, const std::string& source,
              std::map<std::string, std::string> metadata) override;

  void workerEvent(const WorkerEvent& event) override;
  void joining() override { joinedAt_ = std::chrono::steady_clock::now(); }
  void roundAssigned(const rendezvous::protocol::Assignment& assigned) override;
  void restarting(const RestartNote& note) override;
  void exiting(const NodeExit& exit) override;

 private:
  const Settings settings_;
  EventLog log_;
  EventLog runLog_;  // the run directory's events.jsonl
  std::chrono::steady_clock::time_point joinedAt_ = std::chrono::steady_clock::now();
};

}  // namespace ddprun::agent
