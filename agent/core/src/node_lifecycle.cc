#include "ddprun/agent/core/node_lifecycle.h"

#include <signal.h>

#include <fmt/format.h>

#include <iostream>
#include <stdexcept>
#include <utility>
#include <variant>

#include "ddprun/common/logging.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::agent {

namespace protocol = rendezvous::protocol;
using S = NodeState;

namespace {

NodeExit exitOf(int code, std::string reason, std::string report = "",
                const WorkerFailure* rootCause = nullptr) {
  NodeExit exit;
  exit.code = code;
  exit.reason = std::move(reason);
  exit.report = std::move(report);
  exit.rootCause = rootCause;
  return exit;
}

NodeExit exitOf(const JobFailed& failed) { return exitOf(failed.exitCode, "", failed.report); }
NodeExit exitOf(const StoreLost& lost) { return exitOf(1, lost.reason); }
NodeExit exitOf(const SignalStop& stop) {
  return exitOf(128 + stop.signal,
                fmt::format("ddprun (pid {}) received {} and stopped its workers", ::getpid(),
                            signalName(stop.signal)));
}

// One overload per request (std::visit needs them all): the exit it asks
// for once nothing runs, whatever the group's outcome.
std::optional<NodeExit> finalExitOf(const RoundEnded&) { return std::nullopt; }
std::optional<NodeExit> finalExitOf(const JobFailed&) { return std::nullopt; }
std::optional<NodeExit> finalExitOf(const StoreLost& lost) { return exitOf(lost); }
std::optional<NodeExit> finalExitOf(const SignalStop& stop) { return exitOf(stop); }

RestartNote noteOf(std::int64_t round, std::int64_t restarts, int failedCode, std::string reason) {
  RestartNote note;
  note.round = round;
  note.restarts = restarts;
  note.failedCode = failedCode;
  note.reason = std::move(reason);
  return note;
}

}  // namespace

const char* stateName(NodeState state) {
  switch (state) {
    case S::kIdle:
      return "idle";
    case S::kJoining:
      return "joining";
    case S::kWaitingForGate:
      return "waiting-for-gate";
    case S::kRunning:
      return "running";
    case S::kStopping:
      return "stopping";
    case S::kDeciding:
      return "deciding";
    case S::kBackoff:
      return "backoff";
    case S::kLeaving:
      return "leaving";
    case S::kDraining:
      return "draining";
    case S::kDone:
      return "done";
  }
  return "?";
}

bool transitionAllowed(NodeState from, NodeState to) {
  if (to == S::kDone) return from != S::kDone;  // every state can end
  switch (from) {
    case S::kIdle:
      return to == S::kJoining;
    case S::kJoining:
      return to == S::kWaitingForGate || to == S::kRunning || to == S::kDraining;
    case S::kWaitingForGate:
      return to == S::kRunning || to == S::kJoining || to == S::kLeaving;
    case S::kRunning:
      return to == S::kStopping || to == S::kDeciding || to == S::kLeaving;
    case S::kStopping:
      return to == S::kJoining || to == S::kDeciding || to == S::kLeaving;
    case S::kDeciding:
      return to == S::kBackoff || to == S::kJoining || to == S::kLeaving;
    case S::kBackoff:
      return to == S::kJoining;
    case S::kLeaving:
      return to == S::kDraining;
    case S::kDraining:
    case S::kDone:
      return false;
  }
  return false;
}

NodeLifecycle::NodeLifecycle(LifecycleSettings settings, LifecyclePorts ports)
    : settings_(std::move(settings)),
      ports_(ports),
      backoff_(settings_.backoff, settings_.backoffSeed) {}

void NodeLifecycle::moveTo(NodeState next) {
  if (!transitionAllowed(state_, next)) {
    throw std::logic_error(fmt::format("node lifecycle: no transition from {} to {}",
                                       stateName(state_), stateName(next)));
  }
  DDPRUN_DEBUG("Node: {} -> {}.", stateName(state_), stateName(next));
  state_ = next;
}

void NodeLifecycle::drop(const char* input) const {
  DDPRUN_DEBUG("Node: {} while {}: nothing to do.", input, stateName(state_));
}

void NodeLifecycle::start() { join(); }

void NodeLifecycle::join() {
  moveTo(S::kJoining);
  for (auto* hook : hooks_) hook->joining();
  ports_.rounds.join([this](JoinResult result) { onJoined(std::move(result)); });
}

void NodeLifecycle::onJoined(JoinResult result) {
  if (state_ != S::kJoining) return drop("a join's answer");
  if (const auto* lost = requestIf<StoreLost>(stop_)) {
    // The store went while this node waited. An answer it gave first (the
    // round's timeout naming the missing nodes, the job's failure) says
    // more than the loss; a round it formed cannot run without it.
    if (!result.answered || result.assignment) {
      announce(*lost);
      return exitWith(exitOf(*lost));
    }
    DDPRUN_INFO("The store went after it answered this node's join ({}); the answer stands.",
                lost->reason);
    stop_.reset();
  }
  if (const auto exit = finalExit()) return exitWith(*exit);  // a signal meanwhile
  if (result.closed) {
    return exitWith(exitOf(result.exitCode, "", result.report));
  }
  if (result.excluded) {
    // This host failed in too many rounds in a row: the others go on
    // without it. It exits with its last failure's code.
    std::cerr << "ddprun: this node is left out of the job: " << result.error
              << "; the other nodes continue without it\n";
    return drainThenExit(exitOf(lastFailureCode_ != 0 ? lastFailureCode_ : 1,
                                "this node is left out of the job: " + result.error),
                         "This node is left out");
  }
  if (!result.assignment) {
    std::cerr << "ddprun: error: the rendezvous failed: " << result.error << "\n";
    // The store's host keeps it up while the others still wait (their own
    // join timeout names the missing nodes, not a lost store).
    return drainThenExit(exitOf(1, "the rendezvous failed: " + result.error),
                         "This node's rendezvous failed");
  }
  attempt_.assignment = *result.assignment;
  attempt_.restartCount = static_cast<int>(attempt_.assignment.restarts);
  attempt_.runIndex = static_cast<int>(attempt_.assignment.round) - 1;
  stop_.reset();  // a round's end or the job's failure stopped the attempt before
  startWhenOpen();
  // The join's answer and an event travel by different paths: an event for
  // this round that came first applies now.
  if (earlyEvent_ && earlyEvent_->round == attempt_.assignment.round) {
    const auto event = *earlyEvent_;
    earlyEvent_.reset();
    onRoundEvent(event);
  }
  earlyEvent_.reset();
}

void NodeLifecycle::startWhenOpen() {
  if (ports_.gate == nullptr || ports_.gate->ready()) return startGroup();
  moveTo(S::kWaitingForGate);
  const std::uint64_t wait = ++gateWaits_;
  ports_.gate->whenReady([this, wait] {
    if (state_ != S::kWaitingForGate || wait != gateWaits_) return drop("the gate opening");
    startGroup();
  });
}

void NodeLifecycle::startGroup() {
  moveTo(S::kRunning);
  attemptStarted_ = ports_.clock.now();
  progressed_ = false;
  const std::uint64_t run = ++runs_;
  for (auto* hook : hooks_) hook->attemptStarted(attempt_);
  ports_.runner.start(attempt_,
                      [this, run](GroupOutcome outcome) { onGroupDone(run, std::move(outcome)); });
}

void NodeLifecycle::stopGroup(int signal) {
  if (state_ == S::kRunning) {
    moveTo(S::kStopping);
    // The hooks first: a watchdog or a file timer would only kill a worker
    // that is being stopped already, and blame it.
    for (auto* hook : hooks_) hook->attemptStopping(attempt_, signal);
    if (stop_) {
      for (auto* hook : hooks_) hook->stopRequested(attempt_, *stop_);
    }
  }
  // A signal from the user or the scheduler, or a lost store, gives the
  // workers --shutdown_timeout; a peer's failure (their world is broken)
  // gives them the survivors' grace.
  const bool survivors = requestIf<RoundEnded>(stop_) || requestIf<JobFailed>(stop_);
  ports_.runner.stop(signal, survivors
                                 ? std::min(settings_.survivorGrace, settings_.shutdownTimeout)
                                 : settings_.shutdownTimeout);
}

void NodeLifecycle::onRoundEvent(const protocol::Event& event) {
  if (event.type == protocol::EventType::kNodeExcluded ||
      event.type == protocol::EventType::kNodeReadmitted) {
    DDPRUN_WARN("Rendezvous: {}.", event.message);  // news, not a change of this round
    return;
  }
  if (state_ == S::kDone) return drop("a round event");
  if (event.round > attempt_.assignment.round) {
    earlyEvent_ = event;  // kept until this node has joined that round
    return;
  }
  if (event.round != attempt_.assignment.round) return drop("a stale round event");
  if (event.type == protocol::EventType::kJobFailed) {
    // The job's budget is spent: nothing of this node restarts or rejoins.
    const JobFailed failed{static_cast<int>(event.exitCode), event.message};
    if (state_ == S::kBackoff) return exitWith(exitOf(failed));
    // Stopping for a round's end: the outcome leaves with the job's report
    // instead of joining again.
    if (state_ == S::kStopping && request(failed)) return;
    if (state_ != S::kRunning && state_ != S::kWaitingForGate) return drop("a round event");
    if (!request(failed)) return drop("the job failed while another stop stands");
    if (state_ == S::kRunning) return stopGroup(SIGTERM);
    return leaveThenExit(exitOf(failed), false);  // waiting for the gate
  }
  if (state_ != S::kRunning && state_ != S::kWaitingForGate) return drop("a round event");
  if (!request(RoundEnded{event.message})) return drop("a round's end while another stop stands");
  DDPRUN_WARN("Round {} ended ({}); stopping the workers to join again.", event.round,
              event.message);
  if (state_ == S::kRunning) return stopGroup(SIGTERM);
  // Waiting for the gate: as if the group had ended without a failure.
  rejoin(event.message);
}

void NodeLifecycle::onStoreLost(const std::string& what) {
  if (state_ == S::kDone || state_ == S::kLeaving || state_ == S::kDraining) {
    return drop("the store lost");
  }
  // A signal or an earlier loss stands. Or the job has failed and this node
  // is stopping for it: the store's host may close the store before this
  // node is done, and the exit is the job's.
  const StoreLost lost{what};
  if (!request(lost)) return drop("the store lost while another stop stands");
  // Joining: the call in flight fails on its own, or brings the store's
  // last answer (onJoined says which).
  if (state_ == S::kJoining) return;
  announce(lost);
  switch (state_) {
    case S::kRunning:
    case S::kStopping:
      return stopGroup(SIGTERM);
    case S::kWaitingForGate:
    case S::kBackoff:
      return exitWith(exitOf(lost));
    default:
      return;  // deciding: the call in flight fails on its own
  }
}

void NodeLifecycle::announce(const StoreLost& lost) {
  if (std::exchange(lossAnnounced_, true)) return;
  std::cerr << "ddprun: error: " << lost.reason << "; stopping this node's workers\n";
}

void NodeLifecycle::onSignal(int signal, bool forward) {
  if (state_ == S::kDone) return drop("a signal");
  const auto now = ports_.clock.now();
  // Signal 0 stops nothing by itself: the workers received the signal from
  // its sender, and only the grace period's SIGKILL follows.
  int send = forward ? signal : 0;
  // Slurm signalling the step after the job failed is srun ending a failed
  // step (--kill-on-bad-exit): the job's code and report stand.
  const bool endsAFailedStep = !forward && requestIf<JobFailed>(stop_) != nullptr;
  if (!firstSignalAt_) {
    firstSignalAt_ = now;
    if (!endsAFailedStep) request(SignalStop{signal});  // a lost store's request, if first, stands
    if (forward) {
      DDPRUN_WARN("ddprun received {}; forwarding it to the workers (SIGKILL after {} ms).",
                  signalName(signal), settings_.shutdownTimeout.count());
    } else {
      DDPRUN_WARN(
          "Slurm sent {} to the job step, the workers included; ddprun stops them (SIGKILL after "
          "{} ms).",
          signalName(signal), settings_.shutdownTimeout.count());
    }
  } else if (!forward) {
    // Slurm repeating itself (srun passes a cancel on, too): its own SIGKILL
    // follows after KillWait; the workers keep their grace period.
    DDPRUN_DEBUG("Slurm sent {} again; the workers are being stopped already.", signalName(signal));
    return;
  } else if (now - *firstSignalAt_ < kSameDelivery) {
    // coreutils' timeout signals ddprun, then its whole process group, within
    // a millisecond: one request to stop, with the grace period.
    DDPRUN_DEBUG(
        "ddprun received {} again {} ms after the first signal: the same delivery.",
        signalName(signal),
        std::chrono::duration_cast<std::chrono::milliseconds>(now - *firstSignalAt_).count());
    return;
  } else {
    DDPRUN_WARN("ddprun received {} again; killing the workers now.", signalName(signal));
    send = SIGKILL;
  }
  if (state_ == S::kRunning || state_ == S::kStopping) return stopGroup(send);
  // Nothing runs: the node exits as the first signal, or a lost store or the
  // failed job before it, asked (the request stands from then on).
  const NodeExit exit = endsAFailedStep ? exitOf(*requestIf<JobFailed>(stop_))
                                        : finalExit().value_or(exitOf(SignalStop{signal}));
  if (state_ == S::kWaitingForGate) return leaveThenExit(exit, false);
  exitWith(exit);  // joining, deciding, backoff, leaving, draining
}

void NodeLifecycle::fail(const std::string& report, int code) {
  if (state_ == S::kDone) return drop("a fatal error");
  exitWith(exitOf(code, "", report));
}

bool NodeLifecycle::request(StopRequest next) {
  if (!overrides(next, stop_)) return false;
  stop_ = std::move(next);
  return true;
}

std::optional<NodeExit> NodeLifecycle::finalExit() const {
  if (!stop_) return std::nullopt;
  return std::visit([](const auto& request) { return finalExitOf(request); }, *stop_);
}

void NodeLifecycle::onGroupDone(std::uint64_t run, GroupOutcome outcome) {
  if (run != runs_ || (state_ != S::kRunning && state_ != S::kStopping)) {
    return drop("a group's outcome");
  }
  for (auto* hook : hooks_) hook->attemptEnded(attempt_, outcome);
  noProgressInARow_ = progressed_ ? 0 : noProgressInARow_ + 1;
  // A lost store or a signal: the node exits whatever the outcome.
  if (const auto exit = finalExit()) {
    if (const auto* stop = requestIf<SignalStop>(stop_)) {
      DDPRUN_WARN("ddprun stopped {} workers after receiving {}.", settings_.workersPerNode,
                  signalName(stop->signal));
    }
    return leaveThenExit(*exit, false);
  }
  if (!outcome.rootCause) failedRunsInARow_ = 0;  // this node's workers did not fail
  // Success first (as torchelastic checks SUCCEEDED first): workers that all
  // finished are done, even if the round ended elsewhere while their last
  // output drained.
  if (outcome.succeeded) return leaveThenExit(exitOf(0, ""), true);
  if (outcome.rootCause) return onFailure(outcome);
  if (const auto* failed = requestIf<JobFailed>(stop_)) {
    return leaveThenExit(exitOf(*failed), false);
  }
  const auto* ended = requestIf<RoundEnded>(stop_);
  rejoin(ended ? ended->reason : std::string("the workers ended without a failure"));
}

void NodeLifecycle::onFailure(const GroupOutcome& outcome) {
  const WorkerFailure& root = *outcome.rootCause;
  lastFailureCode_ = root.status.shellCode();
  ++failedRunsInARow_;
  std::string report =
      settings_.describeFailure(outcome, {attempt_, history_, failedRunsInARow_, progressed_});
  // A crash loop: this many restarts in a row made no progress already.
  const int allowed = settings_.maxNoProgressRestarts;
  // Only when it stops the job sooner than the spent budget would.
  const bool giveUp =
      allowed >= 0 && noProgressInARow_ > allowed && attempt_.restartCount < settings_.maxRestarts;
  int exitCode = lastFailureCode_;
  if (giveUp) {
    exitCode = settings_.noRestartExitCode.value_or(lastFailureCode_);
    report += fmt::format(
        "ddprun: error: the workers made no progress in {} attempts in a row "
        "(--max_no_progress_restarts={}): not restarting{}.\n",
        noProgressInARow_, allowed,
        settings_.noRestartExitCode
            ? fmt::format("; exit code {} (--no_restart_exit_code)", exitCode)
            : std::string());
  }
  if (unhealthy_) {
    // A worker wedged in the kernel: a new one would meet the same device.
    // Unlike torchrun 2.14 (which exits 0 here), the job fails.
    DDPRUN_WARN("This node is unhealthy (a worker stayed in D state); no restart.");
    deciding_ = std::make_unique<GroupOutcome>(outcome);
    return leaveThenExit(exitOf(exitCode, "", report, &*deciding_->rootCause), false);
  }
  moveTo(S::kDeciding);
  deciding_ = std::make_unique<GroupOutcome>(outcome);
  const FailureNotice notice{
      attempt_.assignment.round, exitCode, root.time, report, giveUp, lostAPeer(root)};
  ports_.rounds.reportFailure(notice, [this, report, exitCode](FailureAnswer answer) {
    onDecision(std::move(answer), *deciding_, report, exitCode);
  });
}

void NodeLifecycle::noteProgress() {
  if (state_ != S::kRunning && state_ != S::kStopping) return drop("progress");
  progressed_ = true;
}

void NodeLifecycle::onDecision(FailureAnswer answer, const GroupOutcome& outcome,
                               const std::string& report, int code) {
  if (state_ != S::kDeciding) return drop("a restart decision");
  const WorkerFailure& root = *outcome.rootCause;
  if (!answer.decision) {
    return exitWith(exitOf(
        code, "",
        report + "ddprun: error: could not reach the rendezvous store: " + answer.error + "\n",
        &root));
  }
  if (!answer.decision->restartAllowed) {
    return leaveThenExit(exitOf(code, "", report, &root), false);
  }
  history_.add(attempt_.restartCount, root);
  restartAfterBackoff(answer.decision->restarts, root.status.shellCode());
}

void NodeLifecycle::restartAfterBackoff(std::int64_t restarts, int failedCode) {
  using std::chrono::milliseconds;
  const auto ranFor =
      std::chrono::duration_cast<milliseconds>(ports_.clock.now() - attemptStarted_);
  const milliseconds wait = backoff_.next(ranFor);
  if (wait == milliseconds(0)) return restart(restarts, failedCode);
  moveTo(S::kBackoff);
  DDPRUN_WARN(
      "The workers failed {} times in a row; restarting in {:.2f} s (back-off doubling up to "
      "--restart_backoff_max={} s).",
      backoff_.failuresInARow(), wait.count() / 1000.0, settings_.backoff.max.count() / 1000.0);
  ports_.clock.after(wait, [this, restarts, failedCode] {
    if (state_ != S::kBackoff) return drop("the back-off's end");
    restart(restarts, failedCode);
  });
}

void NodeLifecycle::restart(std::int64_t restarts, int failedCode) {
  DDPRUN_WARN("{}", ports_.rounds.restartMessage(restarts, settings_.maxRestarts));
  const RestartNote note = noteOf(attempt_.assignment.round, restarts, failedCode, "");
  for (auto* hook : hooks_) hook->restarting(note);
  join();
}

void NodeLifecycle::rejoin(const std::string& reason) {
  const RestartNote note = noteOf(attempt_.assignment.round, -1, 0, reason);
  for (auto* hook : hooks_) hook->restarting(note);
  join();
}

void NodeLifecycle::leaveThenExit(NodeExit exit, bool drain) {
  moveTo(S::kLeaving);
  const int code = exit.code;
  ports_.rounds.leave(attempt_.assignment.round, code, [this, exit = std::move(exit), drain] {
    if (state_ != S::kLeaving) return drop("the round left");
    if (drain) return drainThenExit(exit, "This node's workers are done");
    exitWith(exit);
  });
}

void NodeLifecycle::drainThenExit(NodeExit exit, const std::string& why) {
  if (!ports_.rounds.hosting()) return exitWith(std::move(exit));
  moveTo(S::kDraining);
  DDPRUN_INFO("{}; keeping the store up until every node left.", why);
  ports_.rounds.waitUntilAllLeft([this, exit = std::move(exit)] {
    if (state_ != S::kDraining) return drop("every node gone");
    exitWith(exit);
  });
}

void NodeLifecycle::exitWith(NodeExit exit) {
  ports_.clock.cancel();
  moveTo(S::kDone);
  exitCode_ = exit.code;
  exit.restartCount = attempt_.restartCount;
  for (auto* hook : hooks_) hook->exiting(exit);
  if (settings_.exit) settings_.exit(exit.code);
}

}  // namespace ddprun::agent
