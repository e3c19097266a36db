#include "ddprun/agent/features/downtime/downtime_feature.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <utility>

#include "ddprun/common/env.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/text_file.h"
#include "ddprun/common/unique_directory.h"
#include "progress_hook_source.h"

namespace ddprun::agent {

namespace {

using Clock = IncidentTimeline::Clock;

std::int64_t millis(double seconds) { return std::llround(seconds * 1000.0); }

std::int64_t epochMillis(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// Non-negative milliseconds, for a counter.
std::uint64_t counterMillis(double seconds) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, millis(seconds)));
}

// Writes the Python progress hook as `dir`/sitecustomize.py; "" when it
// did, else why not.
std::string writeProgressHook(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  return replaceFile(dir / "sitecustomize.py", kProgressHookSource);
}

// A private directory for the hook when the run directory's disk is full
// (removed when the node exits); empty when none can be made.
std::filesystem::path makeFallbackHookDirectory() {
  try {
    return makeTemporaryDirectory("ddprun-hook-");
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

DowntimeFeature::DowntimeFeature(boost::asio::io_context& io,
                                 const std::filesystem::path& runDirectory, bool pythonHook,
                                 int localWorkers, FeaturePorts ports, EventRecorder& events,
                                 ImportsLearner& learner)
    : localWorkers_(localWorkers),
      ports_(ports),
      events_(events),
      learner_(learner),
      timeline_(Clock::now(), std::chrono::system_clock::now()),
      pipe_(
          io, runDirectory / "progress.pipe", "the workers' progress pipe", env::kProgressPipe,
          [this](const std::string& line) { onLine(line); },
          [this] { drop("a report longer than PIPE_BUF"); }),
      assumeTraining_(io),
      publishTimer_(io) {
  if (pythonHook) hookDir_ = writeHook(runDirectory);
}

std::filesystem::path DowntimeFeature::writeHook(const std::filesystem::path& runDirectory) {
  const auto dir = runDirectory / "progress_hook";
  const std::string why = writeProgressHook(dir);
  if (why.empty()) return dir;
  // A full disk under --log_dir: the hook goes to a private temporary
  // directory, else the job runs with its Python steps unseen.
  fallbackHookDir_ = makeFallbackHookDirectory();
  if (fallbackHookDir_.empty() || !writeProgressHook(fallbackHookDir_).empty()) {
    DDPRUN_WARN(
        "Cannot write the progress hook to {}: {}; Python workers' steps will not be seen "
        "(docs/operations.md).",
        dir.string(), why);
    removeFallbackHookDir();
    return {};
  }
  DDPRUN_WARN("Cannot write the progress hook to {}: {}; it is in {} instead.", dir.string(), why,
              fallbackHookDir_.string());
  return fallbackHookDir_;
}

void DowntimeFeature::contributeEnvironment(Environment& env) {
  env[env::kProgressPipe] = pipe_.path().string();
  if (hookDir_.empty()) return;
  const auto path = env.find("PYTHONPATH");
  env["PYTHONPATH"] = path == env.end() || path->second.empty()
                          ? hookDir_.string()
                          : hookDir_.string() + ":" + path->second;
}

void DowntimeFeature::heard(const FeatureFact& fact) {
  if (const auto* hang = std::get_if<HangFound>(&fact)) {
    lag_ = std::chrono::duration<double>(hang->stalledSeconds);
  } else if (const auto* timer = std::get_if<TimerRequested>(&fact)) {
    if (const auto localRank = ports_.workers.localRankOf(timer->pid)) onStep(*localRank);
  }
}

DowntimeFeature::~DowntimeFeature() { removeFallbackHookDir(); }

void DowntimeFeature::removeFallbackHookDir() {
  if (fallbackHookDir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(fallbackHookDir_, ignored);
  fallbackHookDir_.clear();
}

void DowntimeFeature::drop(const std::string& reason) {
  if (dropped_[reason]++ == 0) {
    DDPRUN_WARN("The workers' progress pipe dropped {} (further ones are dropped silently).",
                reason);
  }
}

void DowntimeFeature::onLine(const std::string& line) {
  const auto report = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains(telemetry::kProgressPid) ||
      !report[telemetry::kProgressPid].is_number_integer() ||
      !report.contains(telemetry::kProgressEvent) ||
      !report[telemetry::kProgressEvent].is_string()) {
    return drop("a report that is not ddprun's progress JSON");
  }
  const int pid = report[telemetry::kProgressPid].get<int>();
  // The attempt's workers by pid (a worker's last report may be read after
  // it exited), else their descendants.
  const auto started = startedPids_.find(pid);
  const auto localRank = started != startedPids_.end() ? std::optional<int>(started->second)
                         : pid > 0                     ? ports_.workers.localRankOf(pid)
                                                       : std::nullopt;
  if (!localRank) return drop("a report from a pid that is not one of this node's workers");
  const auto event =
      telemetry::progressEventNamed(report[telemetry::kProgressEvent].get<std::string>());
  if (event == telemetry::ProgressEvent::kProcessGroup) {
    timeline_.processGroupFormed(Clock::now(), *localRank);
    events_.record(telemetry::kProcessGroupEvent, "WORKER",
                   {{"global_rank", std::to_string(ports_.workers.rankOf(*localRank))},
                    {"local_rank", std::to_string(*localRank)},
                    {"worker_id", std::to_string(pid)},
                    {"agent_restarts", std::to_string(attempt_.restartCount)},
                    {"attempt", std::to_string(attempt_.runIndex)}});
  } else if (event == telemetry::ProgressEvent::kStep) {
    onStep(*localRank);
  } else if (event == telemetry::ProgressEvent::kImports) {
    learner_.learnProgramImports();
  } else {
    drop("a report of an unknown event");
  }
}

void DowntimeFeature::onStep(int localRank) {
  if (localRank < 0 || localRank >= localWorkers_ || stepped_.contains(localRank)) return;
  stepped_.insert(localRank);  // each rank's first step of the attempt is recorded
  events_.record(telemetry::kFirstStepEvent, "WORKER",
                 {{"global_rank", std::to_string(ports_.workers.rankOf(localRank))},
                  {"local_rank", std::to_string(localRank)},
                  {"agent_restarts", std::to_string(attempt_.restartCount)},
                  {"attempt", std::to_string(attempt_.runIndex)}});
  if (!timeline_.stepped(Clock::now(), localRank)) return;  // not the attempt's first
  assumeTraining_.cancel();
  recordEnded();
  ports_.lifecycle.noteProgress();
}

void DowntimeFeature::workerEvent(const WorkerEvent& event) {
  const auto now = Clock::now();
  if (event.state == "START") {
    startedPids_[event.pid] = event.localRank;
    timeline_.workerStarted(now, event.localRank);
    return;
  }
  // A worker's reports come before its exit: take them first.
  pipe_.drain();
  if (event.state == "FAILED") {
    const bool hang = lag_.count() > 0;
    timeline_.failed(
        now, lag_, hang ? "hang" : "worker failure",
        fmt::format("worker rank {} (local rank {}, pid {}) {}", event.rank, event.localRank,
                    event.pid,
                    event.exitCode ? fmt::format("exited with code {}", *event.exitCode)
                                   : std::string("failed")));
    lag_ = std::chrono::duration<double>(0);
    recordEnded();
  }
}

void DowntimeFeature::joining() {
  timeline_.joining(Clock::now());
  if (!std::exchange(publishing_, true)) publishPeriodically();
}

void DowntimeFeature::attemptStarted(const Attempt& attempt) {
  attempt_ = attempt;
  lag_ = std::chrono::duration<double>(0);
  stepped_.clear();
  startedPids_.clear();
  timeline_.attemptStarted(Clock::now(), attempt.runIndex, localWorkers_);
  assumeTraining_.expires_after(kAssumeTrainingAfter);
  assumeTraining_.async_wait([this](boost::system::error_code ec) {
    if (ec || timeline_.attemptTrained()) return;
    timeline_.assumeTraining(Clock::now());
    recordEnded();
    ports_.lifecycle.noteProgress();
  });
}

void DowntimeFeature::stopRequested(const Attempt&, const StopRequest& why) {
  const auto now = Clock::now();
  std::visit(
      [&](const auto& request) {
        using T = std::decay_t<decltype(request)>;
        if constexpr (std::is_same_v<T, RoundEnded>) {
          timeline_.failed(now, {}, "round ended", request.reason);
        } else if constexpr (std::is_same_v<T, JobFailed>) {
          timeline_.failed(now, {}, "job failed", "the job failed on another node");
        } else if constexpr (std::is_same_v<T, StoreLost>) {
          timeline_.failed(now, {}, "store lost", request.reason);
        }
        // A signal is the end of the job, not an incident.
      },
      why);
  recordEnded();
}

void DowntimeFeature::attemptEnded(const Attempt&, const GroupOutcome&) {
  assumeTraining_.cancel();
  timeline_.attemptEnded(Clock::now());
}

void DowntimeFeature::exiting(const NodeExit&) {
  assumeTraining_.cancel();
  publishTimer_.cancel();
  const auto now = Clock::now();
  timeline_.exiting(now);
  recordEnded();
  publish();
  const DowntimeSummary s = timeline_.summary(now);
  telemetry::DowntimeRecord record;
  record.incidents = s.incidents;
  record.lostMs = millis(s.lostSeconds);
  record.trainingMs = millis(s.trainingSeconds);
  record.elapsedMs = millis(s.elapsedSeconds);
  record.startMs = millis(s.startSeconds);
  if (s.trained) record.goodput = s.goodput();
  for (Phase phase : kPhases) {
    record.phaseMs[telemetry::index(phase)] = millis(s.phaseSeconds[telemetry::index(phase)]);
  }
  events_.record(telemetry::kDowntimeEvent, "AGENT", telemetry::toMetadata(record));
  DDPRUN_INFO("Downtime on this node: {}.", describeDowntime(s));
}

void DowntimeFeature::publishPeriodically() {
  publish();
  publishTimer_.expires_after(kPublishEvery);
  publishTimer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) publishPeriodically();
  });
}

void DowntimeFeature::publish() { ports_.facts.tell(CountersChanged{countersText()}); }

std::string DowntimeFeature::countersText() const {
  const DowntimeSummary s = timeline_.summary(Clock::now());
  telemetry::DowntimeCounters counters;
  counters.incidents = static_cast<std::uint64_t>(s.incidents);
  counters.lostMs = counterMillis(s.lostSeconds);
  counters.trainingMs = counterMillis(s.trainingSeconds);
  counters.elapsedMs = counterMillis(s.elapsedSeconds);
  counters.startMs = counterMillis(s.startSeconds);
  counters.trained = s.trained;
  counters.phases = histograms_;
  return telemetry::encodeCounters(counters);
}

void DowntimeFeature::recordEnded() {
  bool ended = false;
  for (const Incident& incident : timeline_.takeEnded()) {
    ended = true;
    telemetry::IncidentRecord record;
    static_cast<telemetry::IncidentFacts&>(record) = incident;
    record.beganMs = epochMillis(incident.began);
    record.lostMs = millis(incident.lostSeconds);
    for (Phase phase : kPhases) {
      const auto& seconds = incident.seconds[telemetry::index(phase)];
      if (!seconds) continue;
      record.phaseMs[telemetry::index(phase)] = millis(*seconds);
      // The start (incident 0) is not a failure: not in the histograms.
      if (incident.number > 0) histograms_[telemetry::index(phase)].add(millis(*seconds));
    }
    events_.record(telemetry::kIncidentEvent, "AGENT", telemetry::toMetadata(record));
  }
  if (ended) publish();
}

}  // namespace ddprun::agent
