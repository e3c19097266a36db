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
//   - PyTorch file timer requests (TimerRequested: a keep-alive is a step);
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

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/downtime/incident_timeline.h"
#include "ddprun/agent/features/parts/line_pipe.h"

namespace ddprun::agent {

class DowntimeFeature : public Feature, public NodeCountersSource {
 public:
  static constexpr std::chrono::minutes kAssumeTrainingAfter{5};
  static constexpr std::chrono::seconds kPublishEvery{10};

  // Creates the progress pipe in `runDirectory`; with `pythonHook`, writes
  // the Python hook (progress_hook/sitecustomize.py there; where that disk
  // is full, in a private temporary directory removed at exit).
  // `localWorkers`: this node's workers per attempt. Each attempt's first
  // progress goes to the lifecycle; the counters, when they change and
  // every kPublishEvery from the first join, go out as CountersChanged;
  // the hook's "imports" report goes to `learner` (--preload auto).
  // Throws ddprun::Error when the pipe cannot be made.
  DowntimeFeature(boost::asio::io_context& io, const std::filesystem::path& runDirectory,
                  bool pythonHook, int localWorkers, FeaturePorts ports, EventRecorder& events,
                  ImportsLearner& learner);
  ~DowntimeFeature() override;
  DowntimeFeature(const DowntimeFeature&) = delete;
  DowntimeFeature& operator=(const DowntimeFeature&) = delete;

  // Names the pipe (DDPRUN_PROGRESS_PIPE) and puts the hook first on
  // PYTHONPATH.
  void contributeEnvironment(Environment& env) override;
  void workerEvent(const WorkerEvent& event) override;
  void heard(const FeatureFact& fact) override;

  void joining() override;
  void attemptStarted(const Attempt& attempt) override;
  void stopRequested(const Attempt&, const StopRequest& why) override;
  void attemptEnded(const Attempt&, const GroupOutcome&) override;
  void exiting(const NodeExit& exit) override;

  std::string countersText() const override;

 private:
  void onLine(const std::string& line);
  void onStep(int localRank);
  void recordEnded();
  void publish();
  void publishPeriodically();
  void drop(const std::string& reason);
  void removeFallbackHookDir();
  // Writes the Python hook; its directory, or empty when it could not.
  std::filesystem::path writeHook(const std::filesystem::path& runDirectory);

  const int localWorkers_;
  FeaturePorts ports_;
  EventRecorder& events_;
  ImportsLearner& learner_;
  std::filesystem::path hookDir_;          // on the workers' PYTHONPATH; empty: none
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
  boost::asio::steady_timer publishTimer_;
  bool publishing_ = false;
};

}  // namespace ddprun::agent
