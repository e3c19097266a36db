// Node telemetry: what an agent measures about its node's downtime, typed,
// with the one encoding of it that every reader shares. The agent writes it
// (its event log's INCIDENT and DOWNTIME records; the counters it publishes
// into the store every few seconds); the store's /metrics, a single node's
// /metrics, `ddprun status` and `ddprun report` read it
// (docs/operations.md, "Downtime, phase by phase"). No part spells a phase
// name, a counter name or a metadata key but through this header.
//
// Encodings:
//   counters  "name=value" words, space-separated, decimal counts:
//             "incidents=2 lost_ms=4100 ... detect_le_100=1 ... detect_count=2
//             detect_sum_ms=180 ..." (cumulative buckets, bounds in ms).
//             Unknown or malformed words are skipped: the text comes from
//             another node, maybe another version.
//   metadata  the event log's string map: numbers in decimal, booleans
//             "true"/"false", each phase's milliseconds under "<phase>_ms".
//
// Thread-safety: pure functions and values.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::telemetry {

// The phases of an incident, in the order they happen.
enum class Phase { kDetect, kStop, kRestart, kRendezvous, kSpawn, kProcessGroup, kFirstStep };
inline constexpr std::size_t kPhaseCount = 7;
inline constexpr std::array<Phase, kPhaseCount> kPhases{
    Phase::kDetect, Phase::kStop,         Phase::kRestart,  Phase::kRendezvous,
    Phase::kSpawn,  Phase::kProcessGroup, Phase::kFirstStep};
// "detect", "stop", "restart", "rendezvous", "spawn", "process_group",
// "first_step": the names in counters, metadata and metrics labels.
const char* phaseName(Phase phase);
// The same for people: "process group", "first step".
std::string phaseWords(Phase phase);
inline std::size_t index(Phase phase) { return static_cast<std::size_t>(phase); }

// The buckets of a phase's histogram: bounds in milliseconds, then +Inf.
inline constexpr std::array<std::int64_t, 10> kBucketsMs{100,   500,   1000,  2000,   5000,
                                                         10000, 30000, 60000, 300000, 600000};
struct PhaseHistogram {
  std::array<std::uint64_t, kBucketsMs.size() + 1> buckets{};  // cumulative; last: +Inf
  std::uint64_t count = 0;
  std::uint64_t sumMs = 0;
  void add(std::int64_t ms);
  bool operator==(const PhaseHistogram&) const = default;
};

// A node's downtime counters, as its agent publishes them.
struct DowntimeCounters {
  std::uint64_t incidents = 0;  // failures (the start not counted)
  std::uint64_t lostMs = 0;
  std::uint64_t trainingMs = 0;
  std::uint64_t elapsedMs = 0;
  std::uint64_t startMs = 0;  // the first start, until the first step
  // Some attempt trained: else the goodput is unknown (nullopt), not 0.
  bool trained = false;
  std::array<PhaseHistogram, kPhaseCount> phases{};
  std::optional<double> goodput() const;
  bool operator==(const DowntimeCounters&) const = default;
};
std::string encodeCounters(const DowntimeCounters& counters);
// The totals by their names in the encoding (incidents, lost_ms,
// training_ms, elapsed_ms, start_ms): for readers that show them by name
// (`ddprun status --json`).
std::vector<std::pair<const char*, std::uint64_t>> namedTotals(const DowntimeCounters& counters);
// nullopt when the text holds none of them ("": the node published none).
std::optional<DowntimeCounters> decodeDowntimeCounters(std::string_view text);

// A node relay's counters, as its agent publishes them (docs/multinode.md,
// "The node relay"): "connections=8 requests=48 upstream_requests=9
// shared_reads=30 adds_combined=9 bytes_saved=2100".
struct RelayTotals {
  std::uint64_t connections = 0;       // workers' connections open now
  std::uint64_t requests = 0;          // from the workers
  std::uint64_t upstreamRequests = 0;  // sent to the store
  std::uint64_t sharedReads = 0;       // reads answered by another's upstream request
  std::uint64_t addsCombined = 0;      // ADDs that rode in another's upstream ADD
  std::uint64_t bytesSaved = 0;        // reply bytes the store did not send
  bool operator==(const RelayTotals&) const = default;
};
std::string encodeCounters(const RelayTotals& counters);
std::optional<RelayTotals> decodeRelayCounters(std::string_view text);
// By their names in the encoding, in that order.
std::vector<std::pair<const char*, std::uint64_t>> namedTotals(const RelayTotals& counters);

// The progress pipe's line: one JSON object a worker writes in one write
// (at most PIPE_BUF) to DDPRUN_PROGRESS_PIPE, ended by a newline:
// {"pid": P, "event": E, "step": S}. The Python hook (progress_hook.py)
// writes the same keys and events, and "time".
inline constexpr char kProgressPid[] = "pid";
inline constexpr char kProgressEvent[] = "event";
inline constexpr char kProgressStep[] = "step";
enum class ProgressEvent {
  kProcessGroup,  // "process_group": init_process_group returned
  kStep,          // "step": the first optimizer step, then at most once a second
  kImports,       // "imports": the program's imports were written (--preload auto)
};
const char* progressEventName(ProgressEvent event);
std::optional<ProgressEvent> progressEventNamed(std::string_view name);
std::string progressLine(int pid, ProgressEvent event, std::int64_t step);

// "name=value" words of a counters text, in order; words that are not a
// name (a lower-case letter, then letters, digits, '_') and a decimal
// count are skipped. For counters with no fixed set of names (a relay's).
std::vector<std::pair<std::string, std::uint64_t>> parseCounters(std::string_view text);

using Metadata = std::map<std::string, std::string>;

// A worker's process group formed, and its first training step: events the
// agent records from the progress line (metadata: global_rank, local_rank,
// worker_id, agent_restarts, attempt); `ddprun report` reads them.
inline constexpr char kProcessGroupEvent[] = "ddprun.worker.PROCESS_GROUP";
inline constexpr char kFirstStepEvent[] = "ddprun.worker.FIRST_STEP";

// What an incident is, however its times are kept: the agent's live model
// (IncidentTimeline's Incident, in seconds) and the record below (in ms).
struct IncidentFacts {
  int number = 0;          // 0: the first start
  std::string kind;        // "start", "worker failure", "hang", "round ended", ...
  std::string cause;       // one line
  int failedAttempt = -1;  // the attempt (its run index) that failed; -1: the start
  bool startup = false;    // the failed attempt had not trained yet
  bool complete = false;   // training resumed (else: the next failure or the exit)
  // Complete without a step seen: the attempt ran long enough to count as
  // training from its process group (or spawn) on.
  bool assumed = false;
  bool operator==(const IncidentFacts&) const = default;
};

// One incident, as the event log records it when it ends.
inline constexpr char kIncidentEvent[] = "ddprun.agent.INCIDENT";
struct IncidentRecord : IncidentFacts {
  std::int64_t beganMs = 0;  // since the epoch: when the failure happened
  std::int64_t lostMs = 0;
  std::array<std::optional<std::int64_t>, kPhaseCount> phaseMs{};  // absent: never reached
  bool operator==(const IncidentRecord&) const = default;
};
Metadata toMetadata(const IncidentRecord& record);
IncidentRecord incidentFromMetadata(const Metadata& metadata);

// The node's downtime, as the event log records it at the exit.
inline constexpr char kDowntimeEvent[] = "ddprun.agent.DOWNTIME";
struct DowntimeRecord {
  int incidents = 0;
  std::int64_t lostMs = 0, trainingMs = 0, elapsedMs = 0, startMs = 0;
  std::optional<double> goodput;                    // none: no attempt trained
  std::array<std::int64_t, kPhaseCount> phaseMs{};  // summed over the incidents
  bool operator==(const DowntimeRecord&) const = default;
};
Metadata toMetadata(const DowntimeRecord& record);
DowntimeRecord downtimeFromMetadata(const Metadata& metadata);

}  // namespace ddprun::telemetry
