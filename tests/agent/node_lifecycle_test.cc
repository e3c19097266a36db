// The node's lifecycle (agent/core/.../node_lifecycle.h) driven by fakes: a
// group runner, a round source, a start gate and a manual clock. No process,
// socket or timer: each test delivers the answers itself, in the order it
// is about. Also which stop request stands when two come (stop_request.h).
#include "ddprun/agent/core/node_lifecycle.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
namespace protocol = rendezvous::protocol;
using S = NodeState;

class FakeRunner : public GroupRunner {
 public:
  void start(const Attempt& attempt, std::function<void(GroupOutcome)> done) override {
    started.push_back(attempt);
    done_ = std::move(done);
  }
  void stop(int signal, std::chrono::milliseconds grace) override {
    stops.push_back(signal);
    graces.push_back(grace);
  }
  // The running group ends with `outcome`.
  void end(GroupOutcome outcome) {
    auto done = done_;  // a test may end the same group twice
    done(std::move(outcome));
  }
  std::vector<Attempt> started;
  std::vector<int> stops;
  std::vector<std::chrono::milliseconds> graces;

 private:
  std::function<void(GroupOutcome)> done_;
};

class FakeRounds : public RoundSource {
 public:
  void join(std::function<void(JoinResult)> done) override {
    ++joins;
    joinDone = std::move(done);
  }
  void reportFailure(const FailureNotice& failure,
                     std::function<void(FailureAnswer)> done) override {
    reported.push_back({failure.round, failure.exitCode, failure.report, failure.giveUp});
    decisionDone = std::move(done);
  }
  void leave(std::int64_t round, int, std::function<void()> done) override {
    left.push_back(round);
    leaveDone = std::move(done);
  }
  bool hosting() const override { return host; }
  void waitUntilAllLeft(std::function<void()> done) override { allLeftDone = std::move(done); }
  WorkersStore workersStore(const protocol::Assignment&) const override { return {}; }
  std::string restartMessage(std::int64_t restarts, int maxRestarts) const override {
    return "restart " + std::to_string(restarts) + " of " + std::to_string(maxRestarts);
  }

  // Answers the join in flight with round `round` (restarts spent so far).
  void assign(std::int64_t round, std::int64_t restarts = 0) {
    JoinResult result;
    result.assignment.emplace();
    result.answered = true;
    result.assignment->round = round;
    result.assignment->restarts = restarts;
    answerJoin(result);
  }
  void answerJoin(JoinResult result) { take(joinDone)(std::move(result)); }
  void decide(bool allowed, std::int64_t restarts) {
    FailureAnswer answer;
    answer.decision.emplace();
    answer.decision->restartAllowed = allowed;
    answer.decision->restarts = restarts;
    take(decisionDone)(answer);
  }
  void answerLeave() { take(leaveDone)(); }

  struct Report {
    std::int64_t round;
    int code;
    std::string text;
    bool giveUp = false;
  };
  int joins = 0;
  std::vector<Report> reported;
  std::vector<std::int64_t> left;
  bool host = false;
  std::function<void(JoinResult)> joinDone;
  std::function<void(FailureAnswer)> decisionDone;
  std::function<void()> leaveDone;
  std::function<void()> allLeftDone;

 private:
  template <typename F>
  static F take(F& f) {
    EXPECT_TRUE(f) << "no call of that kind is in flight";
    F taken = std::move(f);
    f = nullptr;
    return taken;
  }
};

class FakeGate : public StartGate {
 public:
  bool ready() const override { return open; }
  void whenReady(std::function<void()> then) override { waiting.push_back(std::move(then)); }
  void openNow() {
    open = true;
    auto callbacks = std::move(waiting);
    waiting.clear();
    for (auto& then : callbacks) then();
  }
  bool open = false;
  std::vector<std::function<void()>> waiting;
};

class ManualClock : public LifecycleClock {
 public:
  std::chrono::steady_clock::time_point now() const override { return now_; }
  void after(std::chrono::milliseconds wait, std::function<void()> then) override {
    lastWait = wait;
    due_ = now_ + wait;
    then_ = std::move(then);
  }
  void cancel() override { then_ = nullptr; }
  void advance(std::chrono::milliseconds by) {
    now_ += by;
    if (then_ && now_ >= due_) {
      auto then = std::move(then_);
      then_ = nullptr;
      then();
    }
  }
  bool armed() const { return static_cast<bool>(then_); }
  std::chrono::milliseconds lastWait{-1};

 private:
  std::chrono::steady_clock::time_point now_{std::chrono::hours(1)};
  std::chrono::steady_clock::time_point due_;
  std::function<void()> then_;
};

// Counts what every hook sees, per attempt (by run index).
class RecordingHook : public LifecycleHook {
 public:
  void attemptStarted(const Attempt& a) override {
    ++starts[a.runIndex];
    log.push_back("start " + std::to_string(a.runIndex));
  }
  void attemptStopping(const Attempt& a, int signal) override {
    ++stoppings[a.runIndex];
    log.push_back("stopping " + std::to_string(a.runIndex) + " " + std::to_string(signal));
  }
  void attemptEnded(const Attempt& a, const GroupOutcome&) override {
    ++ends[a.runIndex];
    log.push_back("end " + std::to_string(a.runIndex));
  }
  void restarting(const RestartNote& note) override { restarts.push_back(note); }
  void exiting(const NodeExit& exit) override {
    exits.push_back(exit);
    rootCauseRank = exit.rootCause ? exit.rootCause->rank : -1;
  }
  std::map<int, int> starts, stoppings, ends;
  std::vector<std::string> log;
  std::vector<RestartNote> restarts;
  std::vector<NodeExit> exits;
  int rootCauseRank = -2;
};

GroupOutcome failed(int code, int rank = 0) {
  GroupOutcome outcome;
  WorkerFailure root;
  root.rank = rank;
  root.status.code = code;
  outcome.rootCause = root;
  return outcome;
}
GroupOutcome succeeded() {
  GroupOutcome outcome;
  outcome.succeeded = true;
  return outcome;
}
GroupOutcome stopped() { return GroupOutcome{}; }

protocol::Event roundEnded(std::int64_t round) {
  protocol::Event event;
  event.type = protocol::EventType::kRoundEnded;
  event.round = round;
  event.message = "node x left";
  return event;
}
protocol::Event jobFailed(std::int64_t round, std::int64_t code = 6) {
  protocol::Event event;
  event.type = protocol::EventType::kJobFailed;
  event.round = round;
  event.exitCode = code;
  event.message = "the job's report\n";
  return event;
}

class NodeLifecycleTest : public ::testing::Test {
 protected:
  // `gated`: a start gate that is closed until the test opens it.
  void make(bool gated = false, BackoffLimits backoff = {0ms, 0ms},
            std::function<void(LifecycleSettings&)> adjust = {}) {
    LifecycleSettings settings;
    settings.maxRestarts = 3;
    settings.workersPerNode = 2;
    settings.backoff = backoff;
    settings.backoffSeed = 1;
    settings.describeFailure = [](const GroupOutcome& outcome, const FailureContext& context) {
      return "report: rank " + std::to_string(outcome.rootCause->rank) + " failed, restart " +
             std::to_string(context.attempt.restartCount) + ", " +
             std::to_string(context.failedRunsInARow) + " in a row\n";
    };
    settings.exit = [this](int code) { exits.push_back(code); };
    if (adjust) adjust(settings);
    node = std::make_unique<NodeLifecycle>(
        std::move(settings), LifecyclePorts{runner, rounds, clock, gated ? &gate : nullptr});
    node->addHook(hook);
  }
  // Starts the node and brings it to Running in round `round`.
  void runRound(std::int64_t round = 1, std::int64_t restarts = 0) {
    if (node->state() == S::kIdle) node->start();
    ASSERT_EQ(node->state(), S::kJoining);
    rounds.assign(round, restarts);
    ASSERT_EQ(node->state(), S::kRunning);
  }

  // Two failures in a row with a 1 s back-off: the second waits (round 2).
  // The store's host keeps it up (draining) until every node left, then
  // exits with `code`.
  void drainsUntilEveryNodeLeft(int code) {
    ASSERT_EQ(node->state(), S::kDraining);
    EXPECT_TRUE(exits.empty());
    rounds.allLeftDone();
    EXPECT_EQ(exits, std::vector<int>{code});
  }

  void reachBackoff() {
    make(false, {1000ms, 8000ms});
    runRound();
    runner.end(failed(1));
    rounds.decide(true, 1);
    runRound(2, 1);
    runner.end(failed(1));
    rounds.decide(true, 2);
  }

  FakeRunner runner;
  FakeRounds rounds;
  FakeGate gate;
  ManualClock clock;
  RecordingHook hook;
  std::vector<int> exits;
  std::unique_ptr<NodeLifecycle> node;
};

TEST(NodeLifecycleTable, RefusesWhatNoInputDoes) {
  EXPECT_TRUE(transitionAllowed(S::kIdle, S::kJoining));
  EXPECT_TRUE(transitionAllowed(S::kRunning, S::kStopping));
  EXPECT_FALSE(transitionAllowed(S::kIdle, S::kRunning));
  EXPECT_FALSE(transitionAllowed(S::kBackoff, S::kRunning));  // a restart joins first
  EXPECT_FALSE(transitionAllowed(S::kDraining, S::kJoining));
  for (int to = 0; to <= static_cast<int>(S::kDone); ++to) {
    EXPECT_FALSE(transitionAllowed(S::kDone, static_cast<S>(to))) << stateName(static_cast<S>(to));
  }
}

// Which stop request stands when a second one comes (stop_request.h).
TEST(StopRequestPrecedence, TheNodesEndBeatsTheAttemptsAndTheFirstOfTheNodesEndsStands) {
  const StopRequest ended = RoundEnded{"node x left"};
  const StopRequest failed = JobFailed{6, "report"};
  const StopRequest lost = StoreLost{"lost"};
  const StopRequest signal = SignalStop{SIGTERM};
  for (const auto& next : {ended, failed, lost, signal}) {
    EXPECT_TRUE(overrides(next, std::nullopt)) << next.index();
  }
  EXPECT_FALSE(overrides(ended, ended));
  EXPECT_TRUE(overrides(failed, ended));
  EXPECT_TRUE(overrides(lost, ended));
  EXPECT_TRUE(overrides(signal, ended));
  // The job's failure: only the user's signal replaces it.
  EXPECT_FALSE(overrides(ended, failed));
  EXPECT_FALSE(overrides(failed, failed));
  EXPECT_FALSE(overrides(lost, failed));
  EXPECT_TRUE(overrides(signal, failed));
  // The node's own ends: the first stands.
  for (const auto& standing : {lost, signal}) {
    for (const auto& next : {ended, failed, lost, signal}) {
      EXPECT_FALSE(overrides(next, standing)) << standing.index() << " " << next.index();
    }
  }
  const std::optional<StopRequest> none;
  EXPECT_EQ(requestIf<JobFailed>(none), nullptr);
  EXPECT_EQ(requestIf<JobFailed>(std::optional<StopRequest>(ended)), nullptr);
  const std::optional<StopRequest> standing = failed;
  ASSERT_NE(requestIf<JobFailed>(standing), nullptr);
  EXPECT_EQ(requestIf<JobFailed>(standing)->exitCode, 6);
}

TEST_F(NodeLifecycleTest, AFailureRestartsWhileTheBudgetAllowsThenTheNodeFails) {
  make();
  runRound();
  runner.end(failed(3, 1));
  ASSERT_EQ(node->state(), S::kDeciding);
  ASSERT_EQ(rounds.reported.size(), 1u);
  EXPECT_EQ(rounds.reported[0].code, 3);
  EXPECT_EQ(rounds.reported[0].text, "report: rank 1 failed, restart 0, 1 in a row\n");
  rounds.decide(true, 1);
  ASSERT_EQ(node->state(), S::kJoining);  // the first restart is immediate
  runRound(2, 1);
  EXPECT_EQ(runner.started.back().restartCount, 1);
  EXPECT_EQ(runner.started.back().runIndex, 1);
  runner.end(failed(4, 0));
  EXPECT_EQ(rounds.reported.back().text, "report: rank 0 failed, restart 1, 2 in a row\n");
  rounds.decide(false, 1);
  ASSERT_EQ(node->state(), S::kLeaving);
  EXPECT_TRUE(exits.empty());  // not before the round is left
  rounds.answerLeave();
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{4});
  ASSERT_EQ(hook.exits.size(), 1u);
  EXPECT_EQ(hook.exits[0].report, "report: rank 0 failed, restart 1, 2 in a row\n");
  EXPECT_EQ(hook.rootCauseRank, 0);
  EXPECT_EQ(hook.exits[0].restartCount, 1);
  ASSERT_EQ(hook.restarts.size(), 1u);
  EXPECT_EQ(hook.restarts[0].restarts, 1);
  EXPECT_EQ(hook.restarts[0].failedCode, 3);
}

TEST_F(NodeLifecycleTest, FailuresInARowWaitTheBackOffOnTheClock) {
  make(false, {1000ms, 8000ms});
  runRound();
  runner.end(failed(1));
  rounds.decide(true, 1);
  ASSERT_EQ(node->state(), S::kJoining);  // the first failure restarts at once
  runRound(2, 1);
  runner.end(failed(1));  // the attempt ran for no time: a failure in a row
  rounds.decide(true, 2);
  ASSERT_EQ(node->state(), S::kBackoff);
  EXPECT_GE(clock.lastWait, 500ms);  // half fixed, half jitter
  EXPECT_LE(clock.lastWait, 1000ms);
  const auto first = clock.lastWait;
  clock.advance(first - 1ms);
  EXPECT_EQ(node->state(), S::kBackoff);
  EXPECT_EQ(rounds.joins, 2);
  clock.advance(1ms);
  EXPECT_EQ(node->state(), S::kJoining);
  EXPECT_EQ(rounds.joins, 3);
  runRound(3, 2);
  runner.end(failed(1));
  rounds.decide(true, 3);
  ASSERT_EQ(node->state(), S::kBackoff);
  EXPECT_GE(clock.lastWait, 1000ms);  // doubled
  EXPECT_LE(clock.lastWait, 2000ms);
  // An attempt that ran as long as the cap was healthy: at once again.
  clock.advance(clock.lastWait);
  runRound(4, 3);
  clock.advance(8000ms);
  runner.end(failed(1));
  rounds.decide(true, 4);
  EXPECT_EQ(node->state(), S::kJoining);
}

TEST_F(NodeLifecycleTest, ASignalWhileJoiningEndsTheNodeAtOnce) {
  make();
  node->start();
  node->onSignal(SIGTERM);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  EXPECT_NE(hook.exits[0].reason.find("received SIGTERM"), std::string::npos);
  rounds.assign(1);  // the join's late answer changes nothing
  EXPECT_TRUE(runner.started.empty());
  EXPECT_EQ(exits.size(), 1u);
}

TEST_F(NodeLifecycleTest, ASignalWhileWaitingForTheGateLeavesTheRound) {
  make(true);
  node->start();
  rounds.assign(1);
  ASSERT_EQ(node->state(), S::kWaitingForGate);
  node->onSignal(SIGINT);
  ASSERT_EQ(node->state(), S::kLeaving);
  EXPECT_EQ(rounds.left, std::vector<std::int64_t>{1});
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{128 + SIGINT});
  gate.openNow();
  EXPECT_TRUE(runner.started.empty());
}

TEST_F(NodeLifecycleTest, ASignalWhileRunningStopsTheGroupThenASecondEscalates) {
  make();
  runRound();
  node->onSignal(SIGTERM);
  ASSERT_EQ(node->state(), S::kStopping);
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  EXPECT_EQ(hook.stoppings[0], 1);
  // coreutils' timeout: the same SIGTERM again through the process group.
  clock.advance(std::chrono::milliseconds(1));
  node->onSignal(SIGTERM);
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  // A second signal: no more grace.
  clock.advance(NodeLifecycle::kSameDelivery);
  node->onSignal(SIGINT);
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_EQ(hook.stoppings[0], 1);
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  EXPECT_TRUE(rounds.reported.empty());
}

// A peer's failure (the round ended, or the job failed, elsewhere) gives
// the survivors their short grace; a signal or a lost store gives the
// workers --shutdown_timeout.
TEST_F(NodeLifecycleTest, APeersFailureGivesTheSurvivorsGraceASignalTheShutdownTimeout) {
  auto graces = [](LifecycleSettings& settings) {
    settings.shutdownTimeout = 30s;
    settings.survivorGrace = 50ms;
  };
  make(false, {0ms, 0ms}, graces);
  runRound();
  node->onRoundEvent(roundEnded(1));
  EXPECT_EQ(runner.graces, std::vector<std::chrono::milliseconds>{50ms});
  runner.graces.clear();
  make(false, {0ms, 0ms}, graces);
  runRound();
  node->onSignal(SIGTERM);
  EXPECT_EQ(runner.graces, std::vector<std::chrono::milliseconds>{30s});
  runner.graces.clear();
  make(false, {0ms, 0ms}, graces);
  runRound();
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.graces, std::vector<std::chrono::milliseconds>{30s});
  runner.graces.clear();
  // The survivors' grace never exceeds --shutdown_timeout.
  make(false, {0ms, 0ms}, [](LifecycleSettings& settings) {
    settings.shutdownTimeout = 20ms;
    settings.survivorGrace = 50ms;
  });
  runRound();
  node->onRoundEvent(roundEnded(1));
  EXPECT_EQ(runner.graces, std::vector<std::chrono::milliseconds>{20ms});
}

// A lost store stops the group; the user's first signal afterwards is
// a first signal (forwarded, with the grace period), not a second one.
TEST_F(NodeLifecycleTest, AFirstSignalAfterAStoreLostStopIsNoEscalation) {
  make();
  runRound();
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  clock.advance(std::chrono::seconds(2));
  node->onSignal(SIGTERM);
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGTERM}));
}

TEST_F(NodeLifecycleTest, ASignalWhileDecidingDoesNotWaitForTheDecision) {
  make();
  runRound();
  runner.end(failed(2));
  ASSERT_EQ(node->state(), S::kDeciding);
  node->onSignal(SIGTERM);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  rounds.decide(true, 1);  // late: nothing restarts
  EXPECT_EQ(rounds.joins, 1);
}

TEST_F(NodeLifecycleTest, ASignalDuringTheBackOffEndsItAndTheTimer) {
  reachBackoff();
  ASSERT_EQ(node->state(), S::kBackoff);
  node->onSignal(SIGTERM);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_FALSE(clock.armed());
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
}

TEST_F(NodeLifecycleTest, ASignalWhileLeavingOrDrainingEndsAtOnce) {
  make();
  runRound();
  runner.end(succeeded());
  ASSERT_EQ(node->state(), S::kLeaving);
  node->onSignal(SIGTERM);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});

  rounds = FakeRounds{};
  rounds.host = true;
  exits.clear();
  make();
  runRound();
  runner.end(succeeded());
  rounds.answerLeave();
  ASSERT_EQ(node->state(), S::kDraining);
  node->onSignal(SIGTERM);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
}

TEST_F(NodeLifecycleTest, TheStoreLostWhileJoiningEndsTheNodeWhenTheJoinFails) {
  make();
  node->start();
  node->onStoreLost("lost the rendezvous store at h:1 (no heartbeat answered)");
  EXPECT_EQ(node->state(), S::kJoining);  // the join in flight fails on its own
  JoinResult failedJoin;
  failedJoin.error = "connection closed";
  rounds.answerJoin(failedJoin);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost the rendezvous store at h:1 (no heartbeat answered)");
}

// The store answered the join (the round did not form in time), then its
// host exited and this node noticed the closed store on another connection
// first: the answer, naming the missing nodes, is the exit, not the loss.
TEST_F(NodeLifecycleTest, AJoinAnsweredBeforeTheStoreWentExitsWithTheAnswer) {
  make();
  node->start();
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(node->state(), S::kJoining);
  JoinResult timedOut;
  timedOut.error = "rendezvous 'job' did not complete: 1 of 3 nodes joined";
  timedOut.answered = true;
  rounds.answerJoin(timedOut);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_NE(hook.exits[0].reason.find("the rendezvous failed: rendezvous 'job' did not complete"),
            std::string::npos)
      << hook.exits[0].reason;
}

// A round the store formed before it went cannot run without it.
TEST_F(NodeLifecycleTest, ARoundAssignedBeforeTheStoreWentIsNotStarted) {
  make();
  node->start();
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  rounds.assign(1);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost the rendezvous store at h:1 (closed)");
  EXPECT_TRUE(runner.started.empty());
}

// The store's host whose own join timed out keeps the store up until the
// others' joins end too: each says what it waited for, not "lost the store".
TEST_F(NodeLifecycleTest, AHostWhoseJoinFailsKeepsTheStoreUpForTheOthers) {
  rounds.host = true;
  make();
  node->start();
  JoinResult timedOut;
  timedOut.error = "rendezvous 'job' did not complete: 2 of 3 nodes joined";
  rounds.answerJoin(timedOut);
  drainsUntilEveryNodeLeft(1);
  EXPECT_NE(hook.exits[0].reason.find("the rendezvous failed: rendezvous 'job' did not complete"),
            std::string::npos)
      << hook.exits[0].reason;
}

TEST_F(NodeLifecycleTest, TheStoreLostWhileRunningStopsTheGroupAndExitsOne) {
  make();
  runRound();
  node->onStoreLost("lost etcd at a:1 (lease expired)");
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  runner.end(stopped());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(rounds.joins, 1);
}

TEST_F(NodeLifecycleTest, ARoundEndDuringTheGateWaitSpendsNoRestart) {
  make(true);
  node->start();
  rounds.assign(1);
  ASSERT_EQ(node->state(), S::kWaitingForGate);
  node->onRoundEvent(roundEnded(1));
  ASSERT_EQ(node->state(), S::kJoining);
  EXPECT_TRUE(rounds.reported.empty());
  ASSERT_EQ(hook.restarts.size(), 1u);
  EXPECT_EQ(hook.restarts[0].restarts, -1);  // none spent
  EXPECT_EQ(hook.restarts[0].reason, "node x left");
  gate.openNow();  // the first round's wait: it starts nothing now
  EXPECT_TRUE(runner.started.empty());
  rounds.assign(2);
  ASSERT_EQ(node->state(), S::kRunning);
  ASSERT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(runner.started[0].restartCount, 0);
  EXPECT_EQ(runner.started[0].runIndex, 1);
}

TEST_F(NodeLifecycleTest, AnEventForTheNextRoundThatCameFirstIsReplayed) {
  make();
  runRound();
  node->onRoundEvent(roundEnded(1));
  ASSERT_EQ(node->state(), S::kStopping);
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kJoining);
  node->onRoundEvent(roundEnded(2));  // before the join's answer for round 2
  EXPECT_EQ(node->state(), S::kJoining);
  rounds.assign(2);
  EXPECT_EQ(node->state(), S::kStopping);  // started, then stopped for the event
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGTERM}));
  EXPECT_EQ(hook.starts[1], 1);
  EXPECT_EQ(hook.stoppings[1], 1);
}

TEST_F(NodeLifecycleTest, SuccessBeatsARoundEndThatCameWhileTheOutputDrained) {
  make();
  runRound();
  node->onRoundEvent(roundEnded(1));
  ASSERT_EQ(node->state(), S::kStopping);
  runner.end(succeeded());  // every worker had exited 0
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{0});
  EXPECT_EQ(rounds.joins, 1);  // no new round
}

TEST_F(NodeLifecycleTest, TheJobFailingElsewhereEndsTheBackOffAndARoundEndsStop) {
  protocol::Event jobFailed;
  jobFailed.type = protocol::EventType::kJobFailed;
  jobFailed.exitCode = 6;
  jobFailed.message = "the job's report\n";
  // Waiting to restart: the node ends at once with the job's report.
  reachBackoff();
  ASSERT_EQ(node->state(), S::kBackoff);
  jobFailed.round = 2;
  node->onRoundEvent(jobFailed);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_FALSE(clock.armed());
  EXPECT_EQ(exits, std::vector<int>{6});
  EXPECT_EQ(hook.exits.back().report, "the job's report\n");
  // Stopping for a round end: the job's failure replaces it (no new round).
  rounds = FakeRounds{};
  exits.clear();
  make();
  runRound();
  node->onRoundEvent(roundEnded(1));
  jobFailed.round = 1;
  node->onRoundEvent(jobFailed);
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{6});
  EXPECT_EQ(rounds.joins, 1);
}

// The job failed (a lost node of a Slurm step): the store's host may close
// the store while this node still stops its workers; the exit stays the
// job's failure, not "lost the store".
TEST_F(NodeLifecycleTest, TheStoreClosingAfterTheJobFailedKeepsTheJobsReport) {
  make();
  runRound();
  protocol::Event jobFailed;
  jobFailed.type = protocol::EventType::kJobFailed;
  jobFailed.round = 1;
  jobFailed.exitCode = 1;
  jobFailed.message = "ddprun: error: the job lost a node\n";
  node->onRoundEvent(jobFailed);
  ASSERT_EQ(node->state(), S::kStopping);
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits.back().report, "ddprun: error: the job lost a node\n");
}

// The job failed on another node of a Slurm step: srun's --kill-on-bad-exit
// sends SIGTERM to this node while it stops its workers or leaves. The
// signal only hurries the stop; the exit stays the job's code and report
// (srun returns the highest code of its tasks: 143 would hide the 3). The
// user's own signal replaces the failure (ASignalWhileTheJobsFailure...).
TEST_F(NodeLifecycleTest, ASignalAfterTheJobFailedKeepsTheJobsCode) {
  protocol::Event jobFailed;
  jobFailed.type = protocol::EventType::kJobFailed;
  jobFailed.round = 1;
  jobFailed.exitCode = 3;
  jobFailed.message = "ddprun: sh FAILED\n";
  for (const bool whileLeaving : {false, true}) {
    SCOPED_TRACE(whileLeaving ? "while leaving" : "while stopping");
    rounds = FakeRounds{};
    exits.clear();
    make();
    runRound();
    node->onRoundEvent(jobFailed);
    ASSERT_EQ(node->state(), S::kStopping);
    if (whileLeaving) {
      runner.end(stopped());
      ASSERT_EQ(node->state(), S::kLeaving);
    }
    node->onSignal(SIGTERM, /*forward=*/false);
    if (!whileLeaving) {
      runner.end(stopped());
      ASSERT_EQ(node->state(), S::kLeaving);
      rounds.answerLeave();
    }
    EXPECT_EQ(exits, std::vector<int>{3});
    EXPECT_EQ(hook.exits.back().report, "ddprun: sh FAILED\n");
  }
}

TEST_F(NodeLifecycleTest, AnExcludedHostThatServesTheStoreDrainsThenExitsWithItsFailure) {
  rounds.host = true;
  make();
  runRound();
  runner.end(failed(9));
  rounds.decide(true, 1);
  JoinResult excluded;
  excluded.excluded = true;
  excluded.error = "its workers failed in 2 rounds in a row";
  rounds.answerJoin(excluded);
  drainsUntilEveryNodeLeft(9);
  EXPECT_NE(hook.exits[0].reason.find("left out of the job"), std::string::npos);
}

TEST_F(NodeLifecycleTest, EveryHookSeesEachAttemptStartAndEndExactlyOnce) {
  make();
  runRound();
  runner.end(failed(1));
  rounds.decide(true, 1);
  runRound(2, 1);
  node->onRoundEvent(roundEnded(2));
  runner.end(stopped());
  runner.end(stopped());  // a second outcome for the same group is dropped
  runRound(3, 1);
  node->onSignal(SIGTERM);
  runner.end(stopped());
  rounds.answerLeave();
  for (int run : {0, 1, 2}) {
    EXPECT_EQ(hook.starts[run], 1) << run;
    EXPECT_EQ(hook.ends[run], 1) << run;
  }
  EXPECT_EQ(hook.stoppings[0], 0);  // it failed on its own
  EXPECT_EQ(hook.stoppings[1], 1);
  EXPECT_EQ(hook.stoppings[2], 1);
  EXPECT_EQ(hook.exits.size(), 1u);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
}

TEST_F(NodeLifecycleTest, AnUnhealthyNodeFailsWithoutAskingForARestart) {
  make();
  runRound();
  node->markUnhealthy();
  runner.end(failed(137, 1));
  ASSERT_EQ(node->state(), S::kLeaving);
  EXPECT_TRUE(rounds.reported.empty());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{137});
  EXPECT_EQ(hook.rootCauseRank, 1);
}

// The job failed while the group ran: the stop carries the job's code and
// report (no event to dereference), and the outcome leaves with them.
TEST_F(NodeLifecycleTest, TheJobFailingWhileRunningStopsTheGroupAndExitsWithTheJobsReport) {
  make();
  runRound();
  node->onRoundEvent(jobFailed(1));
  ASSERT_EQ(node->state(), S::kStopping);
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  EXPECT_EQ(hook.stoppings[0], 1);
  node->onRoundEvent(roundEnded(1));  // the job's end stands
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  EXPECT_EQ(rounds.left, std::vector<std::int64_t>{1});
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{6});
  ASSERT_EQ(hook.exits.size(), 1u);
  EXPECT_EQ(hook.exits[0].report, "the job's report\n");
  EXPECT_EQ(hook.exits[0].reason, "");
  EXPECT_EQ(rounds.joins, 1);
  EXPECT_TRUE(hook.restarts.empty());
  EXPECT_TRUE(rounds.reported.empty());
}

TEST_F(NodeLifecycleTest, TheJobFailingWhileWaitingForTheGateLeavesWithTheJobsReport) {
  make(true);
  node->start();
  rounds.assign(1);
  ASSERT_EQ(node->state(), S::kWaitingForGate);
  node->onRoundEvent(jobFailed(1, 4));
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{4});
  EXPECT_EQ(hook.exits[0].report, "the job's report\n");
  gate.openNow();
  EXPECT_TRUE(runner.started.empty());
  EXPECT_EQ(rounds.joins, 1);
}

// A lost store replaces a round's end: the node stops for good (exit 1)
// instead of joining again.
TEST_F(NodeLifecycleTest, TheStoreLostWhileStoppingForARoundEndExitsOneWithoutRejoining) {
  make();
  runRound();
  node->onRoundEvent(roundEnded(1));
  ASSERT_EQ(node->state(), S::kStopping);
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGTERM}));
  EXPECT_EQ(hook.stoppings[0], 1);  // stopping once
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(rounds.joins, 1);
  EXPECT_TRUE(hook.restarts.empty());
}

// A signal replaces a round's end as well: exit 128+N, no new round.
TEST_F(NodeLifecycleTest, ASignalWhileStoppingForARoundEndExitsWithoutRejoining) {
  make();
  runRound();
  node->onRoundEvent(roundEnded(1));
  node->onSignal(SIGINT);
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGINT}));
  runner.end(stopped());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{128 + SIGINT});
  EXPECT_NE(hook.exits[0].reason.find("received SIGINT"), std::string::npos);
  EXPECT_EQ(rounds.joins, 1);
  EXPECT_TRUE(hook.restarts.empty());
}

// The user's signal replaces the job's pending failure: the node exits
// 128+N with the signal's reason, not the job's report.
TEST_F(NodeLifecycleTest, ASignalWhileTheJobsFailureIsPendingExitsWithTheSignal) {
  make();
  runRound();
  node->onRoundEvent(jobFailed(1));
  ASSERT_EQ(node->state(), S::kStopping);
  node->onSignal(SIGTERM);
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGTERM}));
  runner.end(stopped());
  ASSERT_EQ(node->state(), S::kLeaving);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  ASSERT_EQ(hook.exits.size(), 1u);
  EXPECT_NE(hook.exits[0].reason.find("received SIGTERM"), std::string::npos);
  EXPECT_EQ(hook.exits[0].report, "");
}

// Once a signal or a lost store stands, the job's failure, a round's end or
// a (second) lost store change neither the stop nor the exit.
TEST_F(NodeLifecycleTest, NothingReplacesASignalsOrALostStoresStop) {
  make();
  runRound();
  node->onSignal(SIGTERM);
  node->onRoundEvent(jobFailed(1));
  node->onRoundEvent(roundEnded(1));
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  runner.end(stopped());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  EXPECT_NE(hook.exits[0].reason.find("received SIGTERM"), std::string::npos);
  EXPECT_EQ(hook.exits[0].report, "");

  rounds = FakeRounds{};
  runner = FakeRunner{};
  hook = RecordingHook{};
  exits.clear();
  make();
  runRound();
  node->onStoreLost("lost etcd at a:1 (lease expired)");
  node->onRoundEvent(jobFailed(1));
  node->onStoreLost("lost etcd at a:1 (again)");
  EXPECT_EQ(runner.stops, std::vector<int>{SIGTERM});
  runner.end(stopped());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost etcd at a:1 (lease expired)");
  EXPECT_EQ(hook.exits[0].report, "");
}

// A lost store's exit outlives every state until the node can exit: a
// restart decision that still came and the join that follows end with it.
TEST_F(NodeLifecycleTest, TheStoreLostWhileDecidingEndsTheNodeAtTheNextJoin) {
  make();
  runRound();
  runner.end(failed(3));
  ASSERT_EQ(node->state(), S::kDeciding);
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(node->state(), S::kDeciding);  // the report in flight fails on its own
  rounds.decide(true, 1);
  ASSERT_EQ(node->state(), S::kJoining);
  rounds.assign(2, 1);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(runner.started.size(), 1u);
}

// The job's failure stands after the group's outcome (a worker failed while
// it stopped) until the next round: a store closed meanwhile is not this
// node's exit, so a later signal is the first stop that ends it.
TEST_F(NodeLifecycleTest, TheJobsFailureStandsWhileDecidingSoAStoreClosingIsNotTheExit) {
  make();
  runRound();
  node->onRoundEvent(jobFailed(1));
  runner.end(failed(3));
  ASSERT_EQ(node->state(), S::kDeciding);
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(node->state(), S::kDeciding);
  node->onSignal(SIGTERM);
  EXPECT_EQ(node->state(), S::kDone);
  EXPECT_EQ(exits, std::vector<int>{128 + SIGTERM});
  EXPECT_NE(hook.exits[0].reason.find("received SIGTERM"), std::string::npos);
}

// A new round forgets the last attempt's request: after the job's failure
// (a worker failed too, and a restart was still allowed), the next round's
// lost store stops the group and is the exit.
TEST_F(NodeLifecycleTest, ANewRoundForgetsTheLastAttemptsJobFailure) {
  make();
  runRound();
  node->onRoundEvent(jobFailed(1));
  runner.end(failed(3));
  ASSERT_EQ(node->state(), S::kDeciding);
  rounds.decide(true, 1);
  runRound(2, 1);
  node->onStoreLost("lost the rendezvous store at h:1 (closed)");
  ASSERT_EQ(node->state(), S::kStopping);
  EXPECT_EQ(runner.stops, (std::vector<int>{SIGTERM, SIGTERM}));
  runner.end(stopped());
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(hook.exits[0].reason, "lost the rendezvous store at h:1 (closed)");
  EXPECT_EQ(hook.exits[0].report, "");
}

}  // namespace
}  // namespace ddprun::agent

namespace ddprun::agent {
namespace {

// The crash-loop stop: --max_no_progress_restarts=1, --no_restart_exit_code=93.
class CrashLoopTest : public NodeLifecycleTest {
 protected:
  void makeCrashLoop(int maxRestarts = 5, std::optional<int> code = 93) {
    make(false, {0ms, 0ms}, [maxRestarts, code](LifecycleSettings& settings) {
      settings.maxRestarts = maxRestarts;
      settings.maxNoProgressRestarts = 1;
      settings.noRestartExitCode = code;
    });
  }
};

TEST_F(CrashLoopTest, AttemptsWithoutProgressStopTheJobWithItsCodeAndRestartsLeft) {
  makeCrashLoop();
  runRound();
  runner.end(failed(1));
  ASSERT_EQ(rounds.reported.size(), 1u);
  EXPECT_FALSE(rounds.reported[0].giveUp);  // one restart without progress is allowed
  EXPECT_EQ(rounds.reported[0].code, 1);
  rounds.decide(true, 1);
  runRound(2, 1);
  runner.end(failed(1));
  ASSERT_EQ(rounds.reported.size(), 2u);
  EXPECT_TRUE(rounds.reported[1].giveUp);
  EXPECT_EQ(rounds.reported[1].code, 93);  // what the job fails with everywhere
  EXPECT_NE(rounds.reported[1].text.find("made no progress in 2 attempts in a row "
                                         "(--max_no_progress_restarts=1): not restarting; "
                                         "exit code 93 (--no_restart_exit_code)"),
            std::string::npos)
      << rounds.reported[1].text;
  rounds.decide(false, 1);
  rounds.answerLeave();
  EXPECT_EQ(exits, std::vector<int>{93});
}

TEST_F(CrashLoopTest, ProgressStartsTheCountAgain) {
  makeCrashLoop();
  runRound();
  runner.end(failed(1));
  rounds.decide(true, 1);
  runRound(2, 1);
  node->noteProgress();  // this attempt trained before it failed
  runner.end(failed(1));
  EXPECT_FALSE(rounds.reported.back().giveUp);
  rounds.decide(true, 2);
  runRound(3, 2);
  runner.end(failed(1));
  EXPECT_FALSE(rounds.reported.back().giveUp);  // one without progress since
  rounds.decide(true, 3);
  runRound(4, 3);
  runner.end(failed(1));
  EXPECT_TRUE(rounds.reported.back().giveUp);
}

TEST_F(CrashLoopTest, ARoundEndedElsewhereCountsAsAnAttemptWithoutProgress) {
  makeCrashLoop();
  runRound();
  node->onRoundEvent(
      protocol::Event{protocol::EventType::kRoundEnded, "job", 1, 0, "node b's worker failed"});
  runner.end(GroupOutcome{});  // stopped, not failed here
  runRound(2, 1);
  runner.end(failed(1));
  EXPECT_TRUE(rounds.reported.back().giveUp);
}

TEST_F(CrashLoopTest, TheSpentBudgetEndsTheJobAsBeforeWithTheWorkersCode) {
  makeCrashLoop(/*maxRestarts=*/1);
  runRound();
  runner.end(failed(7));
  rounds.decide(true, 1);
  runRound(2, 1);
  runner.end(failed(7));
  EXPECT_FALSE(rounds.reported.back().giveUp);  // no restart left to save
  EXPECT_EQ(rounds.reported.back().code, 7);
  EXPECT_EQ(rounds.reported.back().text.find("no progress"), std::string::npos);
}

TEST_F(CrashLoopTest, WithoutAnExitCodeTheJobFailsWithTheWorkersCode) {
  makeCrashLoop(5, std::nullopt);
  runRound();
  runner.end(failed(4));
  rounds.decide(true, 1);
  runRound(2, 1);
  runner.end(failed(4));
  EXPECT_TRUE(rounds.reported.back().giveUp);
  EXPECT_EQ(rounds.reported.back().code, 4);
}

}  // namespace
}  // namespace ddprun::agent
