// The features a node's lifecycle (node_lifecycle.h) carries, each a hook:
//   - AttemptWatchers: --watchdog_timeout's hang watchdog and
//     TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT's D-state watch, made for
//     each attempt; the watchdog and the file timers (TORCHELASTIC_ENABLE_
//     FILE_TIMER) end when the group is being stopped (they would only kill
//     and blame a worker that is stopping already), the D-state watch when
//     the attempt ends;
//   - EventLogHook: --event_log_handler's RESTART and SUCCEEDED/FAILED;
//   - FailureReportPrinter: the final report, after the workers' output;
//   - LauncherErrorFileWriter: TORCHELASTIC_ERROR_FILE on every failing exit.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/node_lifecycle.h"
#include "event_log.h"
#include "file_timer_server.h"
#include "hang_watchdog.h"
#include "output_router.h"
#include "uninterruptible_watch.h"

namespace ddprun::agent {

class AttemptWatchers : public LifecycleHook {
 public:
  struct Callbacks {
    std::function<std::vector<WatchedWorker>()> workers;  // the running group's
    HangWatchdog::HangFn onHang;
    std::function<void(const WatchedWorker&)> onEnteredD;
    std::function<void(const WatchedWorker&, std::chrono::milliseconds)> onStuckInD;
  };
  // `fileTimer` may be null (no file timers).
  AttemptWatchers(boost::asio::io_context& io, const AgentConfig& config,
                  FileTimerServer* fileTimer, Callbacks callbacks);

  void attemptStarted(const Attempt&) override;
  void attemptStopping(const Attempt&, int) override { stopWatchingForHangs(); }
  void attemptEnded(const Attempt&, const GroupOutcome&) override { endAll(); }
  void exiting(const NodeExit&) override { endAll(); }

 private:
  void stopWatchingForHangs();
  void endAll();

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  FileTimerServer* fileTimer_;
  Callbacks callbacks_;
  std::unique_ptr<HangWatchdog> watchdog_;
  std::unique_ptr<UninterruptibleWatch> uninterruptible_;
};

class EventLogHook : public LifecycleHook {
 public:
  EventLogHook(EventLog& events, const AgentConfig& config) : events_(events), config_(config) {}
  void restarting(const RestartNote& note) override;
  void exiting(const NodeExit& exit) override;

 private:
  EventLog& events_;
  const AgentConfig& config_;
};

class FailureReportPrinter : public LifecycleHook {
 public:
  explicit FailureReportPrinter(OutputRouter& router) : router_(router) {}
  void exiting(const NodeExit& exit) override;

 private:
  OutputRouter& router_;
};

class LauncherErrorFileWriter : public LifecycleHook {
 public:
  explicit LauncherErrorFileWriter(std::filesystem::path path) : path_(std::move(path)) {}
  void exiting(const NodeExit& exit) override;

 private:
  std::filesystem::path path_;
};

}  // namespace ddprun::agent
