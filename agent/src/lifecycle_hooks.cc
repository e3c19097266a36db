#include "lifecycle_hooks.h"

#include <fmt/format.h>

#include <iostream>

#include "launcher_error_file.h"

namespace ddprun::agent {

AttemptWatchers::AttemptWatchers(boost::asio::io_context& io, const AgentConfig& config,
                                 FileTimerServer* fileTimer, Callbacks callbacks)
    : io_(io), config_(config), fileTimer_(fileTimer), callbacks_(std::move(callbacks)) {}

void AttemptWatchers::attemptStarted(const Attempt&) {
  endAll();
  if (config_.watchdogTimeout.count() > 0) {
    watchdog_ = std::make_unique<HangWatchdog>(io_, config_.watchdogTimeout, callbacks_.workers,
                                               callbacks_.onHang);
  }
  if (config_.uninterruptibleStateTimeout.count() > 0) {
    uninterruptible_ = std::make_unique<UninterruptibleWatch>(
        io_, config_.uninterruptibleStateTimeout, callbacks_.workers, callbacks_.onEnteredD,
        callbacks_.onStuckInD);
  }
}

void AttemptWatchers::stopWatchingForHangs() {
  watchdog_.reset();
  if (fileTimer_ != nullptr) fileTimer_->clear();
}

void AttemptWatchers::endAll() {
  stopWatchingForHangs();
  uninterruptible_.reset();
}

void EventLogHook::restarting(const RestartNote& note) {
  if (!events_.enabled()) return;
  const bool spent = note.restarts >= 0;
  events_.record("torchelastic.agent.RESTART", "AGENT",
                 {{"run_id", config_.runId},
                  {"hostname", config_.hostname},
                  {"round", std::to_string(note.round)},
                  {"restart", spent ? std::to_string(note.restarts) : std::string()},
                  {"max_restarts", std::to_string(config_.maxRestarts)},
                  {"exit_code", spent ? std::to_string(note.failedCode) : std::string()},
                  {"reason", note.reason.empty() ? "a worker of this node failed" : note.reason}});
}

void EventLogHook::exiting(const NodeExit& exit) {
  if (!events_.enabled()) return;
  events_.record(
      exit.code == 0 ? "torchelastic.agent.status.SUCCEEDED" : "torchelastic.agent.status.FAILED",
      "AGENT",
      {{"run_id", config_.runId},
       {"hostname", config_.hostname},
       {"exit_code", std::to_string(exit.code)},
       {"agent_restarts", std::to_string(exit.restartCount)}});
}

void FailureReportPrinter::exiting(const NodeExit& exit) {
  if (exit.report.empty()) return;
  router_.flushConsole();  // the workers' last lines come before the report
  std::cerr << exit.report << std::flush;
}

void LauncherErrorFileWriter::exiting(const NodeExit& exit) {
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
