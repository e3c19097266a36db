// RunTimeline: one run as `ddprun report` shows it, read back from what the
// agents wrote (docs/operations.md, "ddprun report"): every events.jsonl
// under a run directory (a node's <log_dir>/<run_id>_<random>, or a
// folder holding several nodes' run directories), or one event log file
// (--event_log_handler=file:PATH).
//
// It keeps per node: the workers' lives per attempt (start, end, how they
// ended, when each formed its process group and took its first step), the
// incidents with their phases and the downtime summary; for the job: the
// first and last time seen and how it ended.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/common/node_telemetry.h"

namespace ddprun::launcher::report {

// An incident and a node's downtime as its agent recorded them, and the
// phases' names: the node telemetry's.
using telemetry::DowntimeRecord;
using telemetry::IncidentRecord;

struct WorkerLife {
  int localRank = 0;
  int globalRank = 0;
  int attempt = 0;       // this node's attempts in order: the rank's n-th life
  int restartCount = 0;  // the attempt's TORCHELASTIC_RESTART_COUNT
  std::int64_t startMs = 0;
  std::optional<std::int64_t> endMs;  // none: no end recorded
  std::string state;                  // SUCCEEDED, FAILED, TERMINATED ("" while running)
  std::optional<int> exitCode;
  std::string rawError;
  std::optional<std::int64_t> processGroupMs, firstStepMs;
};

struct NodeTimeline {
  std::string host;                 // its host name ("host (run dir)" when two share it)
  std::vector<WorkerLife> workers;  // in start order
  std::vector<IncidentRecord> incidents;
  std::optional<DowntimeRecord> downtime;
  std::optional<int> exitCode;  // torchelastic.agent.status.*
  std::int64_t firstMs = 0, lastMs = 0;
};

struct RunTimeline {
  std::string runId;
  std::vector<NodeTimeline> nodes;  // a node per events.jsonl, in the files' order
  std::int64_t firstMs = 0, lastMs = 0;
  std::vector<std::filesystem::path> sources;
  std::size_t unreadLines = 0;  // lines that were not an event
};

// Reads `path` (a directory searched for events.jsonl, or one file).
// Throws ddprun::ConfigError when nothing readable is there.
RunTimeline loadRunTimeline(const std::filesystem::path& path);

// The terminal's summary.
std::string formatReportText(const RunTimeline& run);
// One self-contained HTML page (inline SVG and CSS, no script, no server).
std::string formatReportHtml(const RunTimeline& run);

}  // namespace ddprun::launcher::report
