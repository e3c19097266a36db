#include "ddprun/common/node_telemetry.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace ddprun::telemetry {

namespace {

constexpr char kIncidents[] = "incidents";
constexpr char kLostMs[] = "lost_ms";
constexpr char kTrainingMs[] = "training_ms";
constexpr char kElapsedMs[] = "elapsed_ms";
constexpr char kStartMs[] = "start_ms";
constexpr char kTrained[] = "trained";
constexpr char kGoodput[] = "goodput";
constexpr char kIncident[] = "incident";
constexpr char kKind[] = "kind";
constexpr char kCause[] = "cause";
constexpr char kFailedAttempt[] = "failed_attempt";
constexpr char kStartup[] = "startup";
constexpr char kComplete[] = "complete";
constexpr char kAssumed[] = "assumed";
constexpr char kBegan[] = "began";
constexpr char kConnections[] = "connections";
constexpr char kRequests[] = "requests";
constexpr char kUpstreamRequests[] = "upstream_requests";
constexpr char kSharedReads[] = "shared_reads";
constexpr char kAddsCombined[] = "adds_combined";
constexpr char kBytesSaved[] = "bytes_saved";

std::string phaseMsKey(Phase phase) { return std::string(phaseName(phase)) + "_ms"; }

std::string flag(bool value) { return value ? "true" : "false"; }

template <typename Number>
std::optional<Number> number(const Metadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  Number value{};
  const char* end = it->second.data() + it->second.size();
  const auto [ptr, ec] = std::from_chars(it->second.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A counters text's words by name, for a decoder: a missing name reads 0.
struct CounterMap {
  std::map<std::string, std::uint64_t> values;
  bool has(const std::string& name) const { return values.contains(name); }
  std::uint64_t get(const std::string& name) const {
    const auto it = values.find(name);
    return it == values.end() ? 0 : it->second;
  }
};

// nullopt for a text without any counter.
std::optional<CounterMap> countersByName(std::string_view text);

std::string text(const Metadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : it->second;
}

}  // namespace

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kDetect:
      return "detect";
    case Phase::kStop:
      return "stop";
    case Phase::kRestart:
      return "restart";
    case Phase::kRendezvous:
      return "rendezvous";
    case Phase::kSpawn:
      return "spawn";
    case Phase::kProcessGroup:
      return "process_group";
    case Phase::kFirstStep:
      return "first_step";
  }
  return "?";
}

std::string phaseWords(Phase phase) {
  std::string words = phaseName(phase);
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

void PhaseHistogram::add(std::int64_t ms) {
  ms = std::max<std::int64_t>(ms, 0);
  for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
    if (ms <= kBucketsMs[i]) ++buckets[i];
  }
  ++buckets.back();
  ++count;
  sumMs += static_cast<std::uint64_t>(ms);
}

std::optional<double> DowntimeCounters::goodput() const {
  if (!trained) return std::nullopt;
  return elapsedMs == 0 ? 0.0 : static_cast<double>(trainingMs) / static_cast<double>(elapsedMs);
}

std::vector<std::pair<const char*, std::uint64_t>> namedTotals(const DowntimeCounters& c) {
  return {{kIncidents, c.incidents},
          {kLostMs, c.lostMs},
          {kTrainingMs, c.trainingMs},
          {kElapsedMs, c.elapsedMs},
          {kStartMs, c.startMs}};
}

std::string encodeCounters(const DowntimeCounters& c) {
  std::string out;
  for (const auto& [name, value] : namedTotals(c)) out += fmt::format("{}={} ", name, value);
  out += fmt::format("{}={}", kTrained, c.trained ? 1 : 0);
  for (Phase phase : kPhases) {
    const PhaseHistogram& h = c.phases[index(phase)];
    const char* name = phaseName(phase);
    for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
      out += fmt::format(" {}_le_{}={}", name, kBucketsMs[i], h.buckets[i]);
    }
    out += fmt::format(" {}_le_inf={} {}_count={} {}_sum_ms={}", name, h.buckets.back(), name,
                       h.count, name, h.sumMs);
  }
  return out;
}

std::optional<DowntimeCounters> decodeDowntimeCounters(std::string_view text) {
  const auto c = countersByName(text);
  if (!c) return std::nullopt;
  const auto get = [&c](const std::string& name) { return c->get(name); };
  DowntimeCounters out;
  out.incidents = get(kIncidents);
  out.lostMs = get(kLostMs);
  out.trainingMs = get(kTrainingMs);
  out.elapsedMs = get(kElapsedMs);
  out.startMs = get(kStartMs);
  // Agents before "trained" was published reported a goodput whenever any
  // time had passed.
  out.trained = !c->has(kTrained) || get(kTrained) != 0;
  for (Phase phase : kPhases) {
    PhaseHistogram& h = out.phases[index(phase)];
    const std::string name = phaseName(phase);
    for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
      h.buckets[i] = get(fmt::format("{}_le_{}", name, kBucketsMs[i]));
    }
    h.buckets.back() = get(name + "_le_inf");
    h.count = get(name + "_count");
    h.sumMs = get(name + "_sum_ms");
  }
  return out;
}

namespace {

std::optional<CounterMap> countersByName(std::string_view text) {
  const auto words = parseCounters(text);
  if (words.empty()) return std::nullopt;
  return CounterMap{{words.begin(), words.end()}};
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> parseCounters(std::string_view text) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(at, end - at);
    at = end + 1;
    const std::size_t equals = word.find('=');
    if (equals == 0 || equals == std::string_view::npos || equals + 1 == word.size()) continue;
    const std::string_view name = word.substr(0, equals);
    const std::string_view digits = word.substr(equals + 1);
    const bool nameOk =
        name[0] >= 'a' && name[0] <= 'z' && std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        });
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (!nameOk || ec != std::errc() || ptr != digits.data() + digits.size()) continue;
    out.emplace_back(std::string(name), value);
  }
  return out;
}

std::vector<std::pair<const char*, std::uint64_t>> namedTotals(const RelayTotals& c) {
  return {{kConnections, c.connections},           {kRequests, c.requests},
          {kUpstreamRequests, c.upstreamRequests}, {kSharedReads, c.sharedReads},
          {kAddsCombined, c.addsCombined},         {kBytesSaved, c.bytesSaved}};
}

std::string encodeCounters(const RelayTotals& c) {
  std::string out;
  for (const auto& [name, value] : namedTotals(c)) {
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", name, value);
  }
  return out;
}

std::optional<RelayTotals> decodeRelayCounters(std::string_view text) {
  const auto c = countersByName(text);
  if (!c) return std::nullopt;
  const auto get = [&c](const char* name) { return c->get(name); };
  return RelayTotals{get(kConnections), get(kRequests),     get(kUpstreamRequests),
                     get(kSharedReads), get(kAddsCombined), get(kBytesSaved)};
}

const char* progressEventName(ProgressEvent event) {
  switch (event) {
    case ProgressEvent::kProcessGroup:
      return "process_group";
    case ProgressEvent::kStep:
      return "step";
    case ProgressEvent::kImports:
      return "imports";
  }
  return "?";
}

std::optional<ProgressEvent> progressEventNamed(std::string_view name) {
  for (ProgressEvent event :
       {ProgressEvent::kProcessGroup, ProgressEvent::kStep, ProgressEvent::kImports}) {
    if (name == progressEventName(event)) return event;
  }
  return std::nullopt;
}

std::string progressLine(int pid, ProgressEvent event, std::int64_t step) {
  return fmt::format("{{\"{}\": {}, \"{}\": \"{}\", \"{}\": {}}}\n", kProgressPid, pid,
                     kProgressEvent, progressEventName(event), kProgressStep, step);
}

Metadata toMetadata(const IncidentRecord& r) {
  Metadata m{{kIncident, std::to_string(r.number)},
             {kKind, r.kind},
             {kCause, r.cause},
             {kFailedAttempt, std::to_string(r.failedAttempt)},
             {kStartup, flag(r.startup)},
             {kComplete, flag(r.complete)},
             {kAssumed, flag(r.assumed)},
             {kBegan, std::to_string(r.beganMs)},
             {kLostMs, std::to_string(r.lostMs)}};
  for (Phase phase : kPhases) {
    if (const auto& ms = r.phaseMs[index(phase)]) m[phaseMsKey(phase)] = std::to_string(*ms);
  }
  return m;
}

IncidentRecord incidentFromMetadata(const Metadata& m) {
  IncidentRecord r;
  r.number = number<int>(m, kIncident).value_or(0);
  r.kind = text(m, kKind);
  r.cause = text(m, kCause);
  r.failedAttempt = number<int>(m, kFailedAttempt).value_or(-1);
  r.startup = text(m, kStartup) == "true";
  r.complete = text(m, kComplete) == "true";
  r.assumed = text(m, kAssumed) == "true";
  r.beganMs = number<std::int64_t>(m, kBegan).value_or(0);
  r.lostMs = number<std::int64_t>(m, kLostMs).value_or(0);
  for (Phase phase : kPhases) r.phaseMs[index(phase)] = number<std::int64_t>(m, phaseMsKey(phase));
  return r;
}

Metadata toMetadata(const DowntimeRecord& r) {
  Metadata m{{kIncidents, std::to_string(r.incidents)},
             {kLostMs, std::to_string(r.lostMs)},
             {kTrainingMs, std::to_string(r.trainingMs)},
             {kElapsedMs, std::to_string(r.elapsedMs)},
             {kStartMs, std::to_string(r.startMs)},
             {kGoodput, r.goodput ? fmt::format("{:.4f}", *r.goodput) : std::string()}};
  for (Phase phase : kPhases) m[phaseMsKey(phase)] = std::to_string(r.phaseMs[index(phase)]);
  return m;
}

DowntimeRecord downtimeFromMetadata(const Metadata& m) {
  DowntimeRecord r;
  r.incidents = number<int>(m, kIncidents).value_or(0);
  r.lostMs = number<std::int64_t>(m, kLostMs).value_or(0);
  r.trainingMs = number<std::int64_t>(m, kTrainingMs).value_or(0);
  r.elapsedMs = number<std::int64_t>(m, kElapsedMs).value_or(0);
  r.startMs = number<std::int64_t>(m, kStartMs).value_or(0);
  if (const std::string goodput = text(m, kGoodput); !goodput.empty()) {
    try {
      r.goodput = std::stod(goodput);
    } catch (const std::exception&) {
      r.goodput = std::nullopt;
    }
  }
  for (Phase phase : kPhases) {
    r.phaseMs[index(phase)] = number<std::int64_t>(m, phaseMsKey(phase)).value_or(0);
  }
  return r;
}

}  // namespace ddprun::telemetry
