#include "ddprun/agent/features/hang_watchdog/hang_watchdog_feature.h"

#include <signal.h>

#include <fmt/format.h>

#include "ddprun/common/logging.h"

namespace ddprun::agent {

HangWatchdogFeature::HangWatchdogFeature(boost::asio::io_context& io,
                                         std::chrono::milliseconds timeout, RunningWorkers& workers,
                                         FactSink& facts)
    : io_(io), timeout_(timeout), workers_(workers), facts_(facts) {}

void HangWatchdogFeature::attemptStarted(const Attempt&) {
  watchdog_ = std::make_unique<HangWatchdog>(
      io_, timeout_, [this] { return workers_.watched(); },
      [this](const HangReport& report) { onHang(report); });
}

void HangWatchdogFeature::onHang(const HangReport& report) {
  const int rank = workers_.rankOf(report.localRank);
  const std::string which =
      report.stoppedBySignal
          ? fmt::format(
                "this one is stopped by a signal (state T: SIGSTOP, or a debugger) and "
                "made no progress for {:.1f} s; the others wait for it",
                report.stalledSeconds)
          : fmt::format("this one stopped first ({:.1f} s ago{})", report.stalledSeconds,
                        report.aheadSeconds > 0
                            ? fmt::format(", {:.1f} s before the next", report.aheadSeconds)
                        : report.aheadSeconds == 0
                            ? fmt::format(", with others in the same sample{}",
                                          report.cpuAheadSeconds > 0
                                              ? fmt::format(", its CPU time {:.1f} s before theirs",
                                                            report.cpuAheadSeconds)
                                              : std::string())
                            : std::string());
  const std::string cause = fmt::format(
      "hung: no worker of this node made progress (CPU or I/O) for {:.1f} s "
      "(--watchdog_timeout={:g}); {}; ddprun sent it SIGKILL",
      report.quietSeconds, timeout_.count() / 1000.0, which);
  DDPRUN_WARN("Worker rank {} (pid {}) is {}.", rank, report.pid, cause);
  for (const auto& line : report.details) DDPRUN_WARN("  worker rank {}: {}", rank, line);
  for (const auto& peer : report.peers) {
    DDPRUN_WARN("  other worker rank {}: last progress {:.1f} s ago{}{}",
                workers_.rankOf(peer.localRank), peer.stalledSeconds,
                peer.where.empty() ? "" : "; ", peer.where);
  }
  workers_.noteCause(report.localRank, cause, report.details);
  facts_.tell(HangFound{report.stalledSeconds});
  workers_.signal(report.pid, SIGKILL);
}

}  // namespace ddprun::agent
