// EventLog (--event_log_handler): the agent's events as torchelastic's
// Event JSON, one object per line:
//   {"name": "torchelastic.worker.status.FAILED", "source": "WORKER",
//    "timestamp": <ms since the epoch>, "metadata": {...}}
// Names: torchelastic.worker.status.{START,SUCCEEDED,FAILED,TERMINATED} per
// worker (metadata: run_id, global_rank, group_rank, worker_id (pid), role,
// hostname, state, rdzv_backend, raw_error, agent_restarts, exit_code,
// local_rank), "torchelastic.agent.RENDEZVOUS" per round and
// torchelastic.agent.status.{SUCCEEDED,FAILED} at the end (source AGENT).
// "null" records nothing, "console" writes to stderr, "file:PATH" appends
// to PATH. Unlike torchelastic, timestamp is set.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <cstdio>
#include <map>
#include <string>

#include "ddprun/agent/agent_config.h"

namespace ddprun::agent {

class EventLog {
 public:
  // Throws ddprun::Error when the file cannot be opened.
  explicit EventLog(const EventLogConfig& config);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  bool enabled() const { return out_ != nullptr; }
  // Values are JSON-encoded as strings unless they parse as integers.
  void record(const std::string& name, const std::string& source,
              const std::map<std::string, std::string>& metadata);

 private:
  std::FILE* out_ = nullptr;
  bool ownsFile_ = false;
};

}  // namespace ddprun::agent
