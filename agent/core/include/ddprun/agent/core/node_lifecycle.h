// NodeLifecycle: the one owner of a node's state (docs/architecture.md,
// "The node's lifecycle", has the transition table).
//
// A node joins a round, waits for its start gate (--preload's zygote),
// runs one attempt's worker group and then, by what ended it, restarts
// (after a back-off), joins again, leaves, drains (the store's host waits
// for the other nodes) or exits. Every input -- a join's answer, a round
// event, the store lost, a signal, the gate open, the group done, a restart
// decision, the back-off elapsed, the round left, the others gone -- is
// handled here against the current state; an input that does not fit the
// state is dropped (logged at debug level), and every change of state goes
// through one table that refuses an impossible change (std::logic_error: a
// bug here) and logs it at debug level.
// Why the node stops is one StopRequest (stop_request.h), so that no
// impossible mix of causes, codes and events can be written.
//
// Side effects are behind the ports it is given (GroupRunner, RoundSource,
// StartGate, LifecycleClock), and features are LifecycleHooks called on
// attempt start, stopping, attempt end, restart and exit, so the state
// machine knows no process, socket or file, and a feature never changes it.
// tests/agent/node_lifecycle_test.cc drives it with fakes.
//
// Names: an attempt's `restartCount` is TORCHELASTIC_RESTART_COUNT (failure
// restarts before it, the job's in a multi-node job); its `runIndex` names
// its folder (attempt_<runIndex>: the round's number - 1).
//
// Thread-safety: one thread (the agent's loop); every port calls back on it.
// Ownership: borrows its ports and hooks, which must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/agent/core/outcome.h"
#include "ddprun/agent/core/restart_backoff.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/core/stop_request.h"
#include "ddprun/rendezvous/messages.h"

namespace ddprun::agent {

enum class NodeState {
  kIdle,            // not started
  kJoining,         // waiting for a round's assignment
  kWaitingForGate,  // joined; the group waits for the start gate
  kRunning,         // the group runs
  kStopping,        // the group is being stopped; waiting for its outcome
  kDeciding,        // a failure was reported; waiting for the restart decision
  kBackoff,         // waiting before the restart
  kLeaving,         // leaving the round before the exit
  kDraining,        // the store's host waits until every node left
  kDone,            // the exit code is final
};
const char* stateName(NodeState state);
// The transition table (docs/architecture.md): whether `from` -> `to` is a
// change the lifecycle makes.
bool transitionAllowed(NodeState from, NodeState to);

struct Attempt {
  int restartCount = 0;  // TORCHELASTIC_RESTART_COUNT
  int runIndex = 0;      // attempt_<runIndex>
  rendezvous::protocol::Assignment assignment;
};

struct RestartNote {
  std::int64_t round = 0;
  std::int64_t restarts =
      -1;  // the budget spent so far; -1: none spent (the round ended elsewhere)
  int failedCode = 0;
  std::string reason;  // why, when no failure of this node spent a restart
};

struct NodeExit {
  int code = 0;
  std::string reason;  // one line: what ended the node ("" on success)
  std::string report;  // the failure report printed at the end, if any
  const WorkerFailure* rootCause = nullptr;
  int restartCount = 0;
};

class LifecycleHook {
 public:
  virtual ~LifecycleHook() = default;
  // The node joins a round (the first, or again).
  virtual void joining() {}
  virtual void attemptStarted(const Attempt&) {}
  // The group is being stopped with `signal` (before its outcome); `why`:
  // the stop request that asked for it.
  virtual void attemptStopping(const Attempt&, int /*signal*/) {}
  virtual void stopRequested(const Attempt&, const StopRequest& /*why*/) {}
  virtual void attemptEnded(const Attempt&, const GroupOutcome&) {}
  virtual void restarting(const RestartNote&) {}
  virtual void exiting(const NodeExit&) {}
};

// Runs one attempt's workers at a time.
class GroupRunner {
 public:
  virtual ~GroupRunner() = default;
  // `done` is called once, on the loop, after every worker exited.
  virtual void start(const Attempt& attempt, std::function<void(GroupOutcome)> done) = 0;
  // Stops the running group: `signal`, `grace`, SIGKILL; a later call with
  // SIGKILL ends the grace period (as WorkerGroup::stop).
  virtual void stop(int signal, std::chrono::milliseconds grace) = 0;
};

// What a group waits for before it starts (--preload's zygote). No gate:
// nullptr.
class StartGate {
 public:
  virtual ~StartGate() = default;
  virtual bool ready() const = 0;
  virtual void whenReady(std::function<void()> then) = 0;
};

// The back-off's clock: one timer.
class LifecycleClock {
 public:
  virtual ~LifecycleClock() = default;
  virtual std::chrono::steady_clock::time_point now() const = 0;
  virtual void after(std::chrono::milliseconds wait, std::function<void()> then) = 0;
  virtual void cancel() = 0;
};

// What a failure report needs beyond the group's outcome.
struct FailureContext {
  const Attempt& attempt;
  const FailureHistory& history;
  int failedRunsInARow = 0;  // this node's, this one included
  bool progressed = false;   // the attempt made progress (noteProgress) before it failed
};

struct LifecycleSettings {
  int maxRestarts = 0;
  int workersPerNode = 1;
  std::chrono::milliseconds shutdownTimeout{0};
  // The grace of a stop that is no signal's (a round that ended for another
  // node's failure, the job's failure): the survivors' (AgentConfig).
  std::chrono::milliseconds survivorGrace{0};
  BackoffLimits backoff;
  std::uint64_t backoffSeed = 0;
  std::function<std::string(const GroupOutcome&, const FailureContext&)> describeFailure;
  std::function<void(int code)> exit;  // after every hook saw the exit
  // The crash-loop stop (docs/operations.md, "Crash loops"): after this many
  // restarts in a row whose attempts made no progress, the next failure
  // stops the job (giveUp) instead of restarting; -1: never.
  int maxNoProgressRestarts = -1;
  // The code the job then exits with; none: the root cause's.
  std::optional<int> noRestartExitCode;
};

struct LifecyclePorts {
  GroupRunner& runner;
  RoundSource& rounds;
  LifecycleClock& clock;
  StartGate* gate = nullptr;
};

class NodeLifecycle {
 public:
  NodeLifecycle(LifecycleSettings settings, LifecyclePorts ports);
  NodeLifecycle(const NodeLifecycle&) = delete;
  NodeLifecycle& operator=(const NodeLifecycle&) = delete;

  void addHook(LifecycleHook& hook) { hooks_.push_back(&hook); }

  // Joins the first round.
  void start();
  // Inputs from outside the ports.
  void onRoundEvent(const rendezvous::protocol::Event& event);
  // The job's store is gone: `what` says which and why ("lost the
  // rendezvous store at h:p (...)").
  void onStoreLost(const std::string& what);
  // A stop signal: the first stops the group (forwarded unless `forward` is
  // false: the workers received it from its sender too; then the grace
  // period, SIGKILL); another one kSameDelivery or more later kills the
  // workers at once. One within kSameDelivery is the same request
  // (coreutils' timeout signals ddprun and then its process group).
  void onSignal(int signal, bool forward = true);
  static constexpr std::chrono::milliseconds kSameDelivery{500};
  // A worker of this node wedged in the kernel: no restart from now on.
  void markUnhealthy() { unhealthy_ = true; }
  // The running attempt made progress (a rank's first step, or it ran long
  // enough: the downtime feature decides, docs/operations.md).
  void noteProgress();
  // Something the node cannot go on without failed (--preload's zygote):
  // prints `report` and exits with `code`.
  void fail(const std::string& report, int code);

  NodeState state() const { return state_; }
  // The attempt that runs, or ran last.
  const Attempt& attempt() const { return attempt_; }
  std::optional<int> exitCode() const { return exitCode_; }

 private:
  void moveTo(NodeState next);
  void drop(const char* input) const;
  void join();
  void onJoined(JoinResult result);
  void startWhenOpen();
  void startGroup();
  void stopGroup(int signal);
  void onGroupDone(std::uint64_t run, GroupOutcome outcome);
  void onFailure(const GroupOutcome& outcome);
  // `code`: the exit code if the job stops now.
  void onDecision(FailureAnswer answer, const GroupOutcome& outcome, const std::string& report,
                  int code);
  void restartAfterBackoff(std::int64_t restarts, int failedCode);
  void restart(std::int64_t restarts, int failedCode);
  void rejoin(const std::string& reason);
  // Leaves the round, then exits (or drains first when `drain` and hosting).
  void leaveThenExit(NodeExit exit, bool drain);
  // `why` begins the log line ("This node is left out").
  void drainThenExit(NodeExit exit, const std::string& why);
  // Says on stderr, once, that the store is lost and this node stops.
  void announce(const StoreLost& lost);
  void exitWith(NodeExit exit);
  // Makes `next` the stop request unless the standing one wins
  // (stop_request.h); whether it did.
  bool request(StopRequest next);
  // The exit a lost store or a signal asks for once nothing runs; none when
  // nothing, a round's end or the job's failure stopped the node (the
  // group's outcome decides first).
  std::optional<NodeExit> finalExit() const;

  LifecycleSettings settings_;
  LifecyclePorts ports_;
  std::vector<LifecycleHook*> hooks_;
  NodeState state_ = NodeState::kIdle;
  Attempt attempt_;
  // Why the node stops: none until a stop input for this attempt. A round's
  // end or the job's failure stands until the next assignment; a lost store
  // or a signal until the exit.
  std::optional<StopRequest> stop_;
  bool lossAnnounced_ = false;
  // An event for a round not joined yet: news about the next round, apart
  // from why this attempt stops (the node may stop for round r's end and
  // hear of round r+1's before its join is answered).
  std::optional<rendezvous::protocol::Event> earlyEvent_;
  std::optional<int> exitCode_;  // final
  // When the first signal came (escalation), even if a lost store's request
  // stands: the user's first signal still gets the grace period.
  std::optional<std::chrono::steady_clock::time_point> firstSignalAt_;
  std::uint64_t runs_ = 0;       // groups started: matches `done`
  std::uint64_t gateWaits_ = 0;  // matches the gate's callback
  // A worker wedged in the kernel (markUnhealthy): a fact about this host,
  // not a stop, that outlives every attempt and any request; it only
  // refuses a restart.
  bool unhealthy_ = false;
  int failedRunsInARow_ = 0;
  int lastFailureCode_ = 0;
  bool progressed_ = false;   // the running attempt made progress
  int noProgressInARow_ = 0;  // attempts ended without progress, in a row
  FailureHistory history_;
  RestartBackoff backoff_;
  std::chrono::steady_clock::time_point attemptStarted_;
  // The outcome a decision is awaited for (kDeciding).
  std::unique_ptr<GroupOutcome> deciding_;
};

}  // namespace ddprun::agent
