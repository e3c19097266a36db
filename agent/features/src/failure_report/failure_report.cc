#include "ddprun/agent/features/failure_report/failure_report.h"

#include "ddprun/agent/features/failure_report/error_hints.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <sstream>

#include "ddprun/common/signal_names.h"

namespace ddprun::agent {

namespace {

constexpr int kWidth = 72;

std::string exitText(const ExitStatus& status) {
  if (status.signaled) {
    return fmt::format("{} (signal {}; exit code {})", signalName(status.signal), status.signal,
                       status.shellCode());
  }
  return fmt::format("{}", status.code);
}

std::string formatTime(std::chrono::system_clock::time_point time) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch());
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  return fmt::format("{:%Y-%m-%d %H:%M:%S}.{:03d} UTC", utc, static_cast<int>(ms.count() % 1000));
}

void indentLines(std::ostringstream& out, const std::string& text, const char* indent) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) out << indent << line << "\n";
}

}  // namespace

std::string formatFailureReport(const FailureSummary& s) {
  const WorkerFailure& root = s.rootCause;
  std::ostringstream out;
  const std::string rule(kWidth, '=');
  const std::string thin(kWidth, '-');
  out << rule << "\n";
  out << fmt::format("ddprun: {} FAILED after {} attempt{} (--max_restarts={})\n", s.programName,
                     s.attempts, s.attempts == 1 ? "" : "s", s.maxRestarts);
  out << thin << "\n";
  out << "Root cause (first failure):\n";
  out << fmt::format("  rank       : {} (local_rank {}, node {})\n", root.rank, root.localRank,
                     root.nodeRank);
  out << fmt::format("  host       : {}\n", root.host);
  out << fmt::format("  pid        : {}\n", root.pid);
  out << fmt::format("  exit       : {}\n", exitText(root.status));
  if (!root.cause.empty()) out << fmt::format("  cause      : {}\n", root.cause);
  for (const auto& line : root.causeDetails) out << "    " << line << "\n";
  out << fmt::format("  time       : {}\n", formatTime(root.time));
  out << fmt::format("  attempt    : {}\n", root.attempt);
  out << fmt::format("  phase      : {}\n", s.startedTraining
                                                ? "after training began"
                                                : "at startup (before any rank's first step)");
  out << fmt::format("  error_file : {}{}\n",
                     root.error ? root.errorFile.string() : std::string("<none written>"),
                     root.error && !s.filesKept ? " (removed at exit; --log_dir keeps it)" : "");
  if (root.error) {
    out << "  message    : " << root.error->message << "\n";
    if (!root.error->traceback.empty()) {
      out << "  traceback  :\n";
      indentLines(out, root.error->traceback, "    ");
    }
  } else if (!root.stderrTail.empty()) {
    out << "  last lines of stderr:\n";
    for (const auto& line : root.stderrTail) out << "    " << line << "\n";
  } else {
    out << "  message    : <no error file and no stderr output>\n";
  }
  if (const std::string hint = errorHint(root); !hint.empty()) {
    out << "  hint       : " << hint << "\n";
  }
  if (!s.flightRecorder.empty()) out << "  flight rec.: " << s.flightRecorder << "\n";
  if (!s.otherFailures.empty()) {
    out << thin << "\n"
        << "Other failures in the same attempt:\n";
    for (const auto& f : s.otherFailures) {
      out << "  " << describeExit(f) << " at " << formatTime(f.time) << "\n";
    }
  }
  if (!s.stoppedRanks.empty()) {
    out << "Stopped by ddprun after the failure: rank";
    out << (s.stoppedRanks.size() == 1 ? " " : "s ");
    for (std::size_t i = 0; i < s.stoppedRanks.size(); ++i) {
      out << (i ? ", " : "") << s.stoppedRanks[i];
    }
    out << "\n";
  }
  if (!s.repeatedFailure.empty()) out << "Repeated failure: " << s.repeatedFailure << "\n";
  if (!s.history.empty()) {
    out << thin << "\n" << fmt::format("Earlier attempts ({} failed):\n", s.history.count());
    for (const auto& line : s.history.lines()) out << "  " << line << "\n";
  }
  out << rule << "\n";
  return out.str();
}

}  // namespace ddprun::agent
