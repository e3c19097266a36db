// IncidentTimeline: where a node's downtime went, phase by phase
// (docs/operations.md, "Downtime, phase by phase").
//
// An incident begins when an attempt fails (a worker of this node failed or
// hung, the round ended elsewhere: another node's failure, a lost node, a
// membership change) and ends at the first training step of a later
// attempt, or at the next failure (a restart that never trained), or at
// the exit. The first start is incident 0, from ddprun's start. Its phases:
//   detect         the failure happened -> ddprun knew (0 for an exit, seen
//                  at once; a hang: since the culprit stopped progressing)
//   stop           detected -> every worker of the attempt reaped
//   restart        reaped -> the next join (the restart decision, back-off)
//   rendezvous     the join -> the round complete
//   spawn          the round -> every worker of this node started
//   process_group  spawned -> every worker's process group formed
//   first_step     formed (else spawned) -> the first rank's first step
// A phase never reached is absent. Goodput is the time training (from an
// attempt's first step to its failure, or the exit) over the time since
// the start.
//
// Thread-safety: the agent's loop thread only; plain logic on the times
// it is given (tests/agent/incident_timeline_test.cc drives it).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/common/node_telemetry.h"

namespace ddprun::agent {

// The phases and their names: the node telemetry's (one home for every
// part that writes or reads them).
using telemetry::kPhaseCount;
using telemetry::kPhases;
using telemetry::Phase;
using telemetry::phaseName;

// An incident's facts (telemetry::IncidentFacts: number, kind, cause, the
// failed attempt, startup, complete, assumed) and its times.
struct Incident : telemetry::IncidentFacts {
  std::chrono::system_clock::time_point began;  // when the failure happened
  std::array<std::optional<double>, kPhaseCount> seconds;
  double lostSeconds = 0;  // began -> its end
};

struct DowntimeSummary {
  int incidents = 0;  // failures (the start not counted)
  double lostSeconds = 0;
  std::array<double, kPhaseCount> phaseSeconds{};  // summed over the failures
  double startSeconds = 0;                         // the first start, until the first step
  double trainingSeconds = 0;
  double elapsedSeconds = 0;
  // Some attempt trained (a step seen, or assumed): else the goodput is
  // unknown, not 0 (a program that reports no step, in its first minutes).
  bool trained = false;
  double goodput() const { return elapsedSeconds > 0 ? trainingSeconds / elapsedSeconds : 0; }
};

// "3 incidents, 41.2 s lost: detect 0.4, stop 0.2, ..., first step 38.1;
// goodput 93.1 % (start 12.0 s)"
std::string describeDowntime(const DowntimeSummary& summary);

class IncidentTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  // The job started at `start` (`wallStart` on the wall clock).
  IncidentTimeline(Time start, std::chrono::system_clock::time_point wallStart);

  void joining(Time t);
  void attemptStarted(Time t, int attempt, int localWorkers);
  void workerStarted(Time t, int localRank);
  void processGroupFormed(Time t, int localRank);
  // A rank's step: the first of the attempt ends the open incident.
  // Returns true when it was the attempt's first.
  bool stepped(Time t, int localRank);
  // The running attempt has run long without any step report: it counts as
  // training since its process group formed (else since its spawn).
  void assumeTraining(Time t);
  // The running attempt failed: detected at `t`, happened `lag` earlier.
  // Only the first detection of an attempt counts.
  void failed(Time t, std::chrono::duration<double> lag, std::string kind, std::string cause);
  void attemptEnded(Time t);
  // The node exits: an open incident ends here.
  void exiting(Time t);

  // Each incident once it has ended (the caller records it).
  std::vector<Incident> takeEnded();
  bool attemptTrained() const { return trained_; }
  DowntimeSummary summary(Time now) const;

 private:
  struct Open {
    Incident incident;
    Time began;
    std::optional<Time> detected, stopped, joined, round, spawned, formed;
  };
  void end(Time t, bool complete, bool stepSeen = true);
  static double seconds(Time from, Time to);

  Time start_;
  std::chrono::system_clock::time_point wallStart_;
  std::optional<Open> open_;
  std::vector<Incident> ended_;
  int nextNumber_ = 0;
  int attempt_ = -1;
  int localWorkers_ = 0;
  std::vector<bool> started_, formed_;
  int startedCount_ = 0, formedCount_ = 0;
  bool trained_ = false;      // the running attempt took a step
  bool everTrained_ = false;  // some attempt did
  bool failedThisAttempt_ = false;
  std::optional<Time> trainingSince_;  // the running attempt's first step
  double training_ = 0;                // finished training stretches
  DowntimeSummary totals_;
};

}  // namespace ddprun::agent
