// The wording `ddprun report`'s text and HTML share: times, durations,
// phases, a node's outcome and its attempts.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/run_timeline.h"

namespace ddprun::launcher::report {

// "12:00:31.250" (UTC)
std::string clockText(std::int64_t epochMs);
// "41.2 s", "3 min 12 s", "2 h 05 min"
std::string durationText(std::int64_t ms);
// "detect 0.0, stop 0.1, ..., first step 2.1" (seconds; phases not reached left out)
std::string phasesText(
    const std::array<std::optional<std::int64_t>, telemetry::kPhaseCount>& phaseMs);
// "3 incidents, 41.2 s lost: ...; goodput 93.1 % (...)"
std::string downtimeText(const DowntimeRecord& downtime);
// "succeeded", "failed with exit code 93", "no exit recorded"
std::string outcomeText(const NodeTimeline& node);

struct AttemptSpan {
  int attempt = 0;
  int restartCount = 0;
  int workers = 0;
  std::int64_t startMs = 0, endMs = 0;
  std::string ending;  // "rank 3 failed (exit 1)", "all succeeded", "stopped"
};
std::vector<AttemptSpan> attemptsOf(const NodeTimeline& node);

}  // namespace ddprun::launcher::report
