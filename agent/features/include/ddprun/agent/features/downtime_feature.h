// DowntimeFeature: times every incident of this node phase by phase
// (IncidentTimeline), tells the lifecycle when an attempt made progress (the
// crash-loop stop counts attempts without), records each incident in the
// event log and says where the time went when the node exits
// (docs/operations.md, "Downtime, phase by phase").
//
// What it sees, with no change to the training program:
//   - each worker's start and failure (WorkerEvent), a hang's lag (the
//     watchdog), why the lifecycle stopped a group (StopRequest);
//   - the workers' reports on the progress pipe (DDPRUN_PROGRESS_PIPE, in
//     the run directory): Python workers through ddprun's progress hook
//     (progress_hook.py, first on their PYTHONPATH unless
//     DDPRUN_PROGRESS_HOOK=0), C++ workers through ddprun::worker; each
//     report's pid must be one of the running workers or theirs;
//   - PyTorch file timer requests (a keep-alive is a step);
//   - the Python hook's "imports" report (--preload auto), passed on.
// An attempt without any step that runs kAssumeTrainingAfter counts as
// training from its process group (or its spawn): a program that reports
// nothing is neither a crash loop nor all downtime.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/running_workers.h"
#include "ddprun/agent/core/worker_event.h"
#include "ddprun/agent/features/event_log_feature.h"
#include "ddprun/agent/features/incident_timeline.h"
#include "ddprun/agent/features/line_pipe.h"

namespace ddprun::agent {

class DowntimeFeature : public LifecycleHook {
 public:
  static constexpr std::chrono::minutes kAssumeTrainingAfter{5};

  // Creates the progress pipe in `runDirectory` and names it in `env` (the
  // workers' base environment); with `pythonHook`, writes the Python hook
  // (progress_hook/sitecustomize.py there; where that disk is full, in a
  // private temporary directory removed at exit) and puts it first on env's
  // PYTHONPATH. `localWorkers`: this node's workers per attempt.
  // `progressed` is told each attempt's first progress. Throws
  // ddprun::Error when the pipe cannot be made.
  DowntimeFeature(boost::asio::io_context& io, const std::filesystem::path& runDirectory,
                  std::map<std::string, std::string>& env, bool pythonHook, int localWorkers,
                  RunningWorkers& workers, EventLogFeature& events,
                  std::function<void()> progressed);
  ~DowntimeFeature() override;
  DowntimeFeature(const DowntimeFeature&) = delete;
  DowntimeFeature& operator=(const DowntimeFeature&) = delete;

  // Inputs from the other rooms (the root connects them).
  void worker(const WorkerEvent& event);
  void hangFound(double stalledSeconds) { lag_ = std::chrono::duration<double>(stalledSeconds); }
  void fileTimerRequest(int pid);
  // `then` runs when a worker reports that it wrote the program's imports
  // (the "imports" report of --preload auto: DDPRUN_PRELOAD_LEARN).
  void onProgramImports(std::function<void()> then) { programImports_ = std::move(then); }

  void joining() override;
  void attemptStarted(const Attempt& attempt) override;
  void stopRequested(const Attempt&, const StopRequest& why) override;
  void attemptEnded(const Attempt&, const GroupOutcome&) override;
  void exiting(const NodeExit& exit) override;

  // Where the node's counters go (NodeRendezvous::publishNodeCounters: the
  // store's metrics, `ddprun status`): at each incident's end and every
  // kPublishEvery. Without it nothing is published.
  void publishTo(std::function<void(std::string)> publish);
  static constexpr std::chrono::seconds kPublishEvery{10};
  // The totals and, per phase, a histogram of the incidents' seconds, in
  // the node telemetry's counters encoding (ddprun/common/node_telemetry.h).
  std::string countersText() const;

 private:
  void onLine(const std::string& line);
  void onStep(int localRank);
  void recordEnded();
  void publish();
  void publishPeriodically();
  void drop(const std::string& reason);
  void removeFallbackHookDir();

  const int localWorkers_;
  RunningWorkers& workers_;
  EventLogFeature& events_;
  std::function<void()> progressed_;
  std::function<void()> programImports_;
  std::filesystem::path fallbackHookDir_;  // the hook's, when the run directory's disk is full
  IncidentTimeline timeline_;
  LinePipe pipe_;
  boost::asio::steady_timer assumeTraining_;
  std::chrono::duration<double> lag_{0};
  Attempt attempt_;
  std::set<int> stepped_;               // local ranks that took a step in this attempt
  std::map<int, int> startedPids_;      // this attempt's workers: pid -> local rank
  std::map<std::string, int> dropped_;  // reason -> count
  // Per phase: the incidents' seconds.
  std::array<telemetry::PhaseHistogram, kPhaseCount> histograms_;
  std::function<void(std::string)> publish_;
  boost::asio::steady_timer publishTimer_;
};

}  // namespace ddprun::agent
