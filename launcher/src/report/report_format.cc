#include "report/report_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>

namespace ddprun::launcher::report {

std::string clockText(std::int64_t epochMs) {
  const std::time_t seconds = static_cast<std::time_t>(epochMs / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:02}:{:02}:{:02}.{:03}", utc.tm_hour, utc.tm_min, utc.tm_sec,
                     static_cast<int>(epochMs % 1000));
}

std::string durationText(std::int64_t ms) {
  const double s = ms / 1000.0;
  if (s < 60) return fmt::format("{:.1f} s", s);
  if (s < 3600) return fmt::format("{} min {:02} s", ms / 60000, (ms / 1000) % 60);
  return fmt::format("{} h {:02} min", ms / 3600000, (ms / 60000) % 60);
}

std::string phasesText(
    const std::array<std::optional<std::int64_t>, telemetry::kPhaseCount>& phaseMs) {
  std::string out;
  for (std::size_t i = 0; i < phaseMs.size(); ++i) {
    if (!phaseMs[i]) continue;
    out += fmt::format("{}{} {:.1f}", out.empty() ? "" : ", ",
                       telemetry::phaseWords(telemetry::kPhases[i]), *phaseMs[i] / 1000.0);
  }
  return out.empty() ? std::string("no phase reached") : out;
}

std::string downtimeText(const DowntimeRecord& d) {
  std::array<std::optional<std::int64_t>, telemetry::kPhaseCount> phases;
  for (std::size_t i = 0; i < phases.size(); ++i) phases[i] = d.phaseMs[i];
  std::string out = fmt::format("{} incident{}, {:.1f} s lost", d.incidents,
                                d.incidents == 1 ? "" : "s", d.lostMs / 1000.0);
  if (d.incidents > 0) out += ": " + phasesText(phases);
  if (!d.goodput) {
    return out + fmt::format("; no worker reported a training step in {}, so no goodput",
                             durationText(d.elapsedMs));
  }
  out += fmt::format("; goodput {:.1f} % ({} training of {}; the start took {:.1f} s)",
                     100.0 * *d.goodput, durationText(d.trainingMs), durationText(d.elapsedMs),
                     d.startMs / 1000.0);
  return out;
}

std::string outcomeText(const NodeTimeline& node) {
  if (!node.exitCode) return "no exit recorded (still running, or killed)";
  if (*node.exitCode == 0) return "succeeded";
  return fmt::format("failed with exit code {}", *node.exitCode);
}

std::vector<AttemptSpan> attemptsOf(const NodeTimeline& node) {
  std::map<int, AttemptSpan> spans;
  std::map<int, std::vector<const WorkerLife*>> lives;
  for (const auto& life : node.workers) {
    auto [it, inserted] = spans.try_emplace(life.attempt);
    AttemptSpan& span = it->second;
    if (inserted) {
      span.attempt = life.attempt;
      span.restartCount = life.restartCount;
      span.startMs = life.startMs;
      span.endMs = life.startMs;
    }
    ++span.workers;
    span.startMs = std::min(span.startMs, life.startMs);
    span.endMs = std::max(span.endMs, life.endMs.value_or(node.lastMs));
    lives[life.attempt].push_back(&life);
  }
  std::vector<AttemptSpan> out;
  for (auto& [count, span] : spans) {
    const WorkerLife* failed = nullptr;
    bool allSucceeded = true, running = false;
    for (const WorkerLife* life : lives[count]) {
      if (life->state == "FAILED" && (failed == nullptr || *life->endMs < *failed->endMs)) {
        failed = life;
      }
      allSucceeded = allSucceeded && life->state == "SUCCEEDED";
      running = running || !life->endMs;
    }
    if (failed != nullptr) {
      span.ending = fmt::format(
          "rank {} failed first{}", failed->globalRank,
          failed->exitCode ? fmt::format(" (exit {})", *failed->exitCode) : std::string());
    } else if (allSucceeded) {
      span.ending = "every worker succeeded";
    } else if (running) {
      span.ending = "no end recorded";
    } else {
      span.ending = "stopped by ddprun";
    }
    out.push_back(span);
  }
  return out;
}

}  // namespace ddprun::launcher::report
