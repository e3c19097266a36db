// FailureReportFeature: the node's failure report. It writes the report the
// lifecycle asks for when a worker failed (describe: the root cause, the
// other failures, the earlier attempts, a host that failed round after
// round in a job of several nodes) and prints it on the node's exit, after
// the workers' last lines (flushConsole). When the failed attempt left
// flight recorder dumps, the report says what they show (flight_recorder.h).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "ddprun/agent/core/feature.h"

namespace ddprun::agent {

class FailureReportFeature : public Feature {
 public:
  struct Settings {
    std::string programName;
    int maxRestarts = 0;
    bool multiNode = false;
    std::string hostname;
    std::string localAddr;   // --local_addr ("": the round's address)
    std::string python;      // the workers' interpreter ("": not a Python program)
    bool filesKept = false;  // the run directory stays (--log_dir)
  };
  // `flushConsole` writes out the workers' pending console lines;
  // `flightRecorderDir`: where an attempt's flight recorder dumps are.
  FailureReportFeature(Settings settings, std::function<void()> flushConsole,
                       std::function<std::filesystem::path(const Attempt&)> flightRecorderDir);

  // LifecycleSettings::describeFailure.
  std::string describe(const GroupOutcome& outcome, const FailureContext& context) const;
  void exiting(const NodeExit& exit) override;

 private:
  const Settings settings_;
  std::function<void()> flushConsole_;
  std::function<std::filesystem::path(const Attempt&)> flightRecorderDir_;
};

// TORCHELASTIC_ERROR_FILE of the launcher: every failing exit names its
// cause there (launcher_error_file.h).
class LauncherErrorFileFeature : public Feature {
 public:
  explicit LauncherErrorFileFeature(std::filesystem::path path) : path_(std::move(path)) {}
  void exiting(const NodeExit& exit) override;

 private:
  std::filesystem::path path_;
};

}  // namespace ddprun::agent
