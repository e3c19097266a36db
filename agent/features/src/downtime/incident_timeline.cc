#include "ddprun/agent/features/downtime/incident_timeline.h"

#include <fmt/format.h>

#include <algorithm>

namespace ddprun::agent {

std::string describeDowntime(const DowntimeSummary& s) {
  std::string text = fmt::format("{} incident{}, {:.1f} s lost", s.incidents,
                                 s.incidents == 1 ? "" : "s", s.lostSeconds);
  if (s.incidents > 0) {
    text += ":";
    const char* separator = " ";
    for (Phase phase : kPhases) {
      text += fmt::format("{}{} {:.1f}", separator, telemetry::phaseWords(phase),
                          s.phaseSeconds[static_cast<std::size_t>(phase)]);
      separator = ", ";
    }
  }
  if (!s.trained) {
    return text + fmt::format("; no worker reported a training step in {:.1f} s, so no goodput",
                              s.elapsedSeconds);
  }
  text += fmt::format("; goodput {:.1f} % ({:.1f} s training of {:.1f} s; the start took {:.1f} s)",
                      100.0 * s.goodput(), s.trainingSeconds, s.elapsedSeconds, s.startSeconds);
  return text;
}

IncidentTimeline::IncidentTimeline(Time start, std::chrono::system_clock::time_point wallStart)
    : start_(start), wallStart_(wallStart) {
  Open open;
  open.incident.number = nextNumber_++;
  open.incident.kind = "start";
  open.incident.cause = "ddprun started";
  open.incident.began = wallStart;
  open.began = start;
  open_ = std::move(open);
}

double IncidentTimeline::seconds(Time from, Time to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

void IncidentTimeline::joining(Time t) {
  if (open_ && !open_->joined) open_->joined = t;
}

void IncidentTimeline::attemptStarted(Time t, int attempt, int localWorkers) {
  attempt_ = attempt;
  localWorkers_ = localWorkers;
  started_.assign(static_cast<std::size_t>(localWorkers), false);
  formed_.assign(static_cast<std::size_t>(localWorkers), false);
  startedCount_ = formedCount_ = 0;
  trained_ = false;
  failedThisAttempt_ = false;
  trainingSince_.reset();
  if (open_ && !open_->round) open_->round = t;
}

void IncidentTimeline::workerStarted(Time t, int localRank) {
  if (localRank < 0 || localRank >= localWorkers_ || started_[localRank]) return;
  started_[localRank] = true;
  if (++startedCount_ == localWorkers_ && open_ && open_->round && !open_->spawned) {
    open_->spawned = t;
  }
}

void IncidentTimeline::processGroupFormed(Time t, int localRank) {
  if (localRank < 0 || localRank >= localWorkers_ || formed_[localRank]) return;
  formed_[localRank] = true;
  if (++formedCount_ == localWorkers_ && open_ && open_->spawned && !open_->formed) {
    open_->formed = t;
  }
}

bool IncidentTimeline::stepped(Time t, int localRank) {
  if (trained_ || failedThisAttempt_ || localRank < 0 || localRank >= localWorkers_) return false;
  trained_ = everTrained_ = true;
  trainingSince_ = t;
  if (open_ && open_->round) end(t, true);
  return true;
}

void IncidentTimeline::assumeTraining(Time t) {
  if (trained_ || failedThisAttempt_ || attempt_ < 0) return;
  trained_ = everTrained_ = true;
  Time since = t;
  if (open_ && open_->round) {
    since = open_->formed.value_or(open_->spawned.value_or(t));
    end(since, true, false);
  }
  trainingSince_ = since;
}

void IncidentTimeline::failed(Time t, std::chrono::duration<double> lag, std::string kind,
                              std::string cause) {
  if (attempt_ < 0 || failedThisAttempt_) return;
  failedThisAttempt_ = true;
  const Time began = t - std::chrono::duration_cast<Clock::duration>(
                             std::max(lag, std::chrono::duration<double>::zero()));
  if (trainingSince_) {
    training_ += seconds(*trainingSince_, std::max(began, *trainingSince_));
    trainingSince_.reset();
  }
  if (open_) end(began, false);  // a restart that never trained
  Open open;
  open.incident.number = nextNumber_++;
  open.incident.kind = std::move(kind);
  open.incident.cause = std::move(cause);
  open.incident.failedAttempt = attempt_;
  open.incident.startup = !trained_;
  open.incident.began =
      wallStart_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(began - start_);
  open.began = began;
  open.detected = t;
  open_ = std::move(open);
}

void IncidentTimeline::attemptEnded(Time t) {
  if (trainingSince_) {  // ended without a failure seen (success, a signal)
    training_ += seconds(*trainingSince_, t);
    trainingSince_.reset();
  }
  if (open_ && open_->detected && !open_->stopped) open_->stopped = t;
}

void IncidentTimeline::exiting(Time t) {
  if (trainingSince_) {
    training_ += seconds(*trainingSince_, t);
    trainingSince_.reset();
  }
  if (open_) end(t, false);
}

void IncidentTimeline::end(Time t, bool complete, bool stepSeen) {
  Open& o = *open_;
  Incident& incident = o.incident;
  incident.complete = complete;
  incident.assumed = complete && !stepSeen;
  // Each phase runs from the previous mark reached to its own.
  // The start has nothing to detect, stop or decide: its rendezvous runs
  // from ddprun's start.
  const bool start = incident.number == 0;
  const std::array<std::optional<Time>, kPhaseCount> marks{
      o.detected,
      o.stopped,
      start ? std::nullopt : o.joined,
      o.round,
      o.spawned,
      o.formed,
      complete && stepSeen ? std::optional<Time>(t) : std::nullopt};
  Time previous = o.began;
  for (std::size_t i = 0; i < kPhaseCount; ++i) {
    if (!marks[i] || *marks[i] > t) continue;
    incident.seconds[i] = seconds(previous, *marks[i]);
    previous = *marks[i];
  }
  incident.lostSeconds = seconds(o.began, t);
  if (incident.number == 0) {
    totals_.startSeconds = incident.lostSeconds;
  } else {
    ++totals_.incidents;
    totals_.lostSeconds += incident.lostSeconds;
    for (std::size_t i = 0; i < kPhaseCount; ++i) {
      totals_.phaseSeconds[i] += incident.seconds[i].value_or(0);
    }
  }
  ended_.push_back(std::move(incident));
  open_.reset();
}

std::vector<Incident> IncidentTimeline::takeEnded() {
  std::vector<Incident> ended;
  ended.swap(ended_);
  return ended;
}

DowntimeSummary IncidentTimeline::summary(Time now) const {
  DowntimeSummary s = totals_;
  s.trainingSeconds = training_ + (trainingSince_ ? seconds(*trainingSince_, now) : 0.0);
  s.elapsedSeconds = seconds(start_, now);
  s.trained = everTrained_;
  if (open_) {  // still open: its time so far is lost
    const double sofar = seconds(open_->began, now);
    if (open_->incident.number == 0) {
      s.startSeconds = sofar;
    } else {
      ++s.incidents;
      s.lostSeconds += sofar;
    }
  }
  return s;
}

}  // namespace ddprun::agent
