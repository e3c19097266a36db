#include "ddprun/agent/features/failure_report/failure_report_feature.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "ddprun/agent/features/failure_report/failure_report.h"
#include "ddprun/agent/features/failure_report/launcher_error_file.h"
#include "ddprun/agent/features/flight_recorder/flight_recorder.h"

namespace ddprun::agent {

FailureReportFeature::FailureReportFeature(
    Settings settings, std::function<void()> flushConsole,
    std::function<std::filesystem::path(const Attempt&)> flightRecorderDir)
    : settings_(std::move(settings)),
      flushConsole_(std::move(flushConsole)),
      flightRecorderDir_(std::move(flightRecorderDir)) {}

std::string FailureReportFeature::describe(const GroupOutcome& outcome,
                                           const FailureContext& context) const {
  FailureSummary summary;
  summary.programName = settings_.programName;
  summary.attempts = context.attempt.restartCount + 1;
  summary.maxRestarts = settings_.maxRestarts;
  summary.rootCause = *outcome.rootCause;
  summary.otherFailures = outcome.otherFailures;
  summary.stoppedRanks = outcome.stoppedRanks;
  summary.history = context.history;
  if (settings_.multiNode && context.failedRunsInARow >= 2) {
    // In a static job this host cannot be left out: name it.
    summary.repeatedFailure = fmt::format(
        "workers on this node ({}, {}) failed in {} rounds in a row; if they failed first (see "
        "the root cause), check this host",
        settings_.hostname,
        settings_.localAddr.empty() ? context.attempt.assignment.masterAddr : settings_.localAddr,
        context.failedRunsInARow);
  }
  summary.filesKept = settings_.filesKept;
  summary.startedTraining = context.progressed;
  if (flightRecorderDir_) {
    const auto dir = flightRecorderDir_(context.attempt);
    const FlightRecorderFindings found = analyzeFlightRecorder(dir, settings_.python);
    if (!found.dumpedRanks.empty()) {
      summary.flightRecorder = fmt::format("{}{}; dumps of rank{} {} in {}", found.verdict,
                                           found.tool.empty() ? "" : " (" + found.tool + ")",
                                           found.dumpedRanks.size() == 1 ? "" : "s",
                                           fmt::join(found.dumpedRanks, ", "), dir.string());
    }
  }
  return formatFailureReport(summary);
}

void FailureReportFeature::exiting(const NodeExit& exit) {
  if (exit.report.empty()) return;
  flushConsole_();  // the workers' last lines come before the report
  std::cerr << exit.report << std::flush;
}

void LauncherErrorFileFeature::exiting(const NodeExit& exit) {
  if (exit.code == 0) return;
  // Every failing exit names its cause there, not only a worker's failure
  // (torchrun's @record writes its exception: a signal, a rendezvous
  // timeout).
  if (!exit.report.empty()) {
    writeLauncherErrorFile(path_, exit.rootCause, exit.code, exit.report);
    return;
  }
  const std::string what =
      exit.reason.empty() ? fmt::format("ddprun exited with code {}", exit.code) : exit.reason;
  writeLauncherErrorFile(path_, exit.rootCause, exit.code, what, what);
}

}  // namespace ddprun::agent
