// The terminal's summary of a run (`ddprun report RUN_DIR`).
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <sstream>

#include "report/report_format.h"
#include "report/run_timeline.h"

namespace ddprun::launcher::report {

std::string formatReportText(const RunTimeline& run) {
  std::ostringstream out;
  int workers = 0;
  for (const auto& node : run.nodes) workers += static_cast<int>(node.workers.size());
  out << fmt::format("Run {}: {} node{}, {} worker starts, {} ({} to {})\n", run.runId,
                     run.nodes.size(), run.nodes.size() == 1 ? "" : "s", workers,
                     durationText(run.lastMs - run.firstMs), clockText(run.firstMs),
                     clockText(run.lastMs));
  for (const auto& node : run.nodes) {
    out << fmt::format("\nNode {}: {}\n", node.host, outcomeText(node));
    if (node.downtime) out << "  " << downtimeText(*node.downtime) << "\n";
    for (const auto& incident : node.incidents) {
      if (incident.number == 0) continue;
      out << fmt::format(
          "  incident {} at {}: {}: {} ({})\n", incident.number, clockText(incident.beganMs),
          incident.kind, incident.cause,
          incident.startup ? "at startup, before any rank's first step" : "after training began");
      out << fmt::format("    {:.1f} s lost{}: {}\n", incident.lostMs / 1000.0,
                         incident.complete ? "" : " (training did not resume)",
                         phasesText(incident.phaseMs));
    }
    const auto attempts = attemptsOf(node);
    for (const auto& attempt : attempts) {
      out << fmt::format("  attempt {} (restart count {}): {} worker{} from {}, {}\n",
                         attempt.attempt, attempt.restartCount, attempt.workers,
                         attempt.workers == 1 ? "" : "s", clockText(attempt.startMs),
                         attempt.ending);
    }
  }
  return out.str();
}

}  // namespace ddprun::launcher::report
