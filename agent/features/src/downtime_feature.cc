#include "ddprun/agent/features/downtime_feature.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "ddprun/common/env.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/text_file.h"
#include "ddprun/common/unique_directory.h"
#include "progress_hook_source.h"

namespace ddprun::agent {

namespace {

using Clock = IncidentTimeline::Clock;

std::string millis(double seconds) { return std::to_string(std::llround(seconds * 1000.0)); }

std::string epochMillis(std::chrono::system_clock::time_point t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
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
                                 const std::filesystem::path& runDirectory,
                                 std::map<std::string, std::string>& env, bool pythonHook,
                                 int localWorkers, RunningWorkers& workers, EventLogFeature& events,
                                 std::function<void()> progressed)
    : localWorkers_(localWorkers),
      workers_(workers),
      events_(events),
      progressed_(std::move(progressed)),
      timeline_(Clock::now(), std::chrono::system_clock::now()),
      pipe_(
          io, runDirectory / "progress.pipe", "the workers' progress pipe", env::kProgressPipe,
          [this](const std::string& line) { onLine(line); },
          [this] { drop("a report longer than PIPE_BUF"); }),
      assumeTraining_(io),
      publishTimer_(io) {
  env[env::kProgressPipe] = pipe_.path().string();
  if (pythonHook) {
    auto dir = runDirectory / "progress_hook";
    const std::string why = writeProgressHook(dir);
    if (!why.empty()) {
      // A full disk under --log_dir: the hook goes to a private temporary
      // directory, else the job runs with its Python steps unseen.
      fallbackHookDir_ = makeFallbackHookDirectory();
      if (fallbackHookDir_.empty() || !writeProgressHook(fallbackHookDir_).empty()) {
        DDPRUN_WARN(
            "Cannot write the progress hook to {}: {}; Python workers' steps will not be seen "
            "(docs/operations.md).",
            dir.string(), why);
        removeFallbackHookDir();
        return;
      }
      DDPRUN_WARN("Cannot write the progress hook to {}: {}; it is in {} instead.", dir.string(),
                  why, fallbackHookDir_.string());
      dir = fallbackHookDir_;
    }
    const auto path = env.find("PYTHONPATH");
    env["PYTHONPATH"] = path == env.end() || path->second.empty()
                            ? dir.string()
                            : dir.string() + ":" + path->second;
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
  if (!report.is_object() || !report.contains("pid") || !report["pid"].is_number_integer() ||
      !report.contains("event") || !report["event"].is_string()) {
    return drop("a report that is not ddprun's progress JSON");
  }
  const int pid = report["pid"].get<int>();
  // The attempt's workers by pid (a worker's last report may be read after
  // it exited), else their descendants.
  const auto started = startedPids_.find(pid);
  const auto localRank = started != startedPids_.end() ? std::optional<int>(started->second)
                         : pid > 0                     ? workers_.localRankOf(pid)
                                                       : std::nullopt;
  if (!localRank) return drop("a report from a pid that is not one of this node's workers");
  const std::string event = report["event"].get<std::string>();
  if (event == "process_group") {
    timeline_.processGroupFormed(Clock::now(), *localRank);
    events_.record("ddprun.worker.PROCESS_GROUP", "WORKER",
                   {{"global_rank", std::to_string(workers_.rankOf(*localRank))},
                    {"local_rank", std::to_string(*localRank)},
                    {"worker_id", std::to_string(pid)},
                    {"agent_restarts", std::to_string(attempt_.restartCount)},
                    {"attempt", std::to_string(attempt_.runIndex)}});
  } else if (event == "step") {
    onStep(*localRank);
  } else if (event == "imports") {
    if (programImports_) programImports_();
  } else {
    drop("a report of an unknown event");
  }
}

void DowntimeFeature::fileTimerRequest(int pid) {
  if (const auto localRank = workers_.localRankOf(pid)) onStep(*localRank);
}

void DowntimeFeature::onStep(int localRank) {
  if (localRank < 0 || localRank >= localWorkers_ || stepped_.contains(localRank)) return;
  stepped_.insert(localRank);  // each rank's first step of the attempt is recorded
  events_.record("ddprun.worker.FIRST_STEP", "WORKER",
                 {{"global_rank", std::to_string(workers_.rankOf(localRank))},
                  {"local_rank", std::to_string(localRank)},
                  {"agent_restarts", std::to_string(attempt_.restartCount)},
                  {"attempt", std::to_string(attempt_.runIndex)}});
  if (!timeline_.stepped(Clock::now(), localRank)) return;  // not the attempt's first
  assumeTraining_.cancel();
  recordEnded();
  if (progressed_) progressed_();
}

void DowntimeFeature::worker(const WorkerEvent& event) {
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

void DowntimeFeature::joining() { timeline_.joining(Clock::now()); }

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
    if (progressed_) progressed_();
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
  std::map<std::string, std::string> meta{
      {"incidents", std::to_string(s.incidents)},
      {"lost_ms", millis(s.lostSeconds)},
      {"training_ms", millis(s.trainingSeconds)},
      {"elapsed_ms", millis(s.elapsedSeconds)},
      {"start_ms", millis(s.startSeconds)},
      {"goodput", s.trained ? fmt::format("{:.4f}", s.goodput()) : std::string()}};
  for (Phase phase : kPhases) {
    meta[std::string(phaseName(phase)) + "_ms"] =
        millis(s.phaseSeconds[static_cast<std::size_t>(phase)]);
  }
  events_.record("ddprun.agent.DOWNTIME", "AGENT", meta);
  DDPRUN_INFO("Downtime on this node: {}.", describeDowntime(s));
}

void DowntimeFeature::publishTo(std::function<void(std::string)> publish) {
  publish_ = std::move(publish);
  publishPeriodically();
}

void DowntimeFeature::publishPeriodically() {
  publish();
  publishTimer_.expires_after(kPublishEvery);
  publishTimer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) publishPeriodically();
  });
}

void DowntimeFeature::publish() {
  if (publish_) publish_(countersText());
}

std::string DowntimeFeature::countersText() const {
  const DowntimeSummary s = timeline_.summary(Clock::now());
  std::string text =
      fmt::format("incidents={} lost_ms={} training_ms={} elapsed_ms={} start_ms={} trained={}",
                  s.incidents, millis(s.lostSeconds), millis(s.trainingSeconds),
                  millis(s.elapsedSeconds), millis(s.startSeconds), s.trained ? 1 : 0);
  for (Phase phase : kPhases) {
    const Histogram& h = histograms_[static_cast<std::size_t>(phase)];
    const std::string name = phaseName(phase);
    for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
      text += fmt::format(" {}_le_{}={}", name, kBucketsMs[i], h.buckets[i]);
    }
    text += fmt::format(" {}_le_inf={} {}_count={} {}_sum_ms={}", name, h.buckets.back(), name,
                        h.count, name, h.sumMs);
  }
  return text;
}

void DowntimeFeature::recordEnded() {
  bool ended = false;
  for (const Incident& incident : timeline_.takeEnded()) {
    ended = true;
    for (std::size_t p = 0; p < kPhaseCount && incident.number > 0; ++p) {
      if (!incident.seconds[p]) continue;
      const std::int64_t ms = std::llround(*incident.seconds[p] * 1000.0);
      Histogram& h = histograms_[p];
      for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
        if (ms <= kBucketsMs[i]) ++h.buckets[i];
      }
      ++h.buckets.back();
      ++h.count;
      h.sumMs += ms;
    }
    std::map<std::string, std::string> meta{
        {"incident", std::to_string(incident.number)},
        {"kind", incident.kind},
        {"cause", incident.cause},
        {"failed_attempt", std::to_string(incident.failedAttempt)},
        {"startup", incident.startup ? "true" : "false"},
        {"complete", incident.complete ? "true" : "false"},
        {"assumed", incident.assumed ? "true" : "false"},
        {"began", epochMillis(incident.began)},
        {"lost_ms", millis(incident.lostSeconds)}};
    for (Phase phase : kPhases) {
      if (const auto& s = incident.seconds[static_cast<std::size_t>(phase)]) {
        meta[std::string(phaseName(phase)) + "_ms"] = millis(*s);
      }
    }
    events_.record("ddprun.agent.INCIDENT", "AGENT", meta);
  }
  if (ended) publish();
}

}  // namespace ddprun::agent
