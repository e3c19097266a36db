// Where a node's downtime goes (agent/features/.../incident_timeline.h),
// on times the test gives: each phase of the start and of a failure, a
// hang's detection lag, a restart that never trained, an attempt that
// reports no step, and the goodput.
#include "ddprun/agent/features/downtime/incident_timeline.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using Time = IncidentTimeline::Time;

std::size_t at(Phase phase) { return static_cast<std::size_t>(phase); }

class IncidentTimelineTest : public ::testing::Test {
 protected:
  Time t(double seconds) const {
    return start + std::chrono::duration_cast<IncidentTimeline::Clock::duration>(
                       std::chrono::duration<double>(seconds));
  }
  // An attempt of two workers: joined at `from`, round complete +0.1,
  // spawned +0.2, process groups +1.0, first step +3.0.
  void attempt(double from, int number, bool step = true) {
    timeline.joining(t(from));
    timeline.attemptStarted(t(from + 0.1), number, 2);
    timeline.workerStarted(t(from + 0.15), 0);
    timeline.workerStarted(t(from + 0.2), 1);
    timeline.processGroupFormed(t(from + 0.9), 1);
    timeline.processGroupFormed(t(from + 1.0), 0);
    if (step) timeline.stepped(t(from + 3.0), 0);
  }

  Time start = IncidentTimeline::Clock::now();
  IncidentTimeline timeline{start, std::chrono::system_clock::now()};
};

TEST_F(IncidentTimelineTest, TheStartEndsAtTheFirstStepPhaseByPhase) {
  attempt(0.0, 0);
  const auto ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 1u);
  const Incident& s = ended[0];
  EXPECT_EQ(s.number, 0);
  EXPECT_EQ(s.kind, "start");
  EXPECT_TRUE(s.complete);
  EXPECT_FALSE(s.seconds[at(Phase::kDetect)]);  // nothing to detect, stop or decide
  EXPECT_FALSE(s.seconds[at(Phase::kStop)]);
  EXPECT_FALSE(s.seconds[at(Phase::kRestart)]);
  EXPECT_NEAR(*s.seconds[at(Phase::kRendezvous)], 0.1, 1e-6);
  EXPECT_NEAR(*s.seconds[at(Phase::kSpawn)], 0.1, 1e-6);         // the last worker's start
  EXPECT_NEAR(*s.seconds[at(Phase::kProcessGroup)], 0.8, 1e-6);  // the last rank's group
  EXPECT_NEAR(*s.seconds[at(Phase::kFirstStep)], 2.0, 1e-6);
  EXPECT_NEAR(s.lostSeconds, 3.0, 1e-6);
  EXPECT_TRUE(timeline.attemptTrained());
}

TEST_F(IncidentTimelineTest, AFailureIsTimedFromItsDetectionToTheNextFirstStep) {
  attempt(0.0, 0);
  timeline.failed(t(10.0), 0s, "worker failure", "worker rank 1 exited with code 3");
  timeline.failed(t(10.1), 0s, "worker failure", "a knock-on failure");  // the first counts
  timeline.attemptEnded(t(10.5));
  attempt(11.0, 1);
  auto ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 2u);
  const Incident& i = ended[1];
  EXPECT_EQ(i.number, 1);
  EXPECT_EQ(i.cause, "worker rank 1 exited with code 3");
  EXPECT_EQ(i.failedAttempt, 0);
  EXPECT_FALSE(i.startup);
  EXPECT_TRUE(i.complete);
  EXPECT_NEAR(*i.seconds[at(Phase::kDetect)], 0.0, 1e-6);
  EXPECT_NEAR(*i.seconds[at(Phase::kStop)], 0.5, 1e-6);
  EXPECT_NEAR(*i.seconds[at(Phase::kRestart)], 0.5, 1e-6);
  EXPECT_NEAR(*i.seconds[at(Phase::kRendezvous)], 0.1, 1e-6);
  EXPECT_NEAR(*i.seconds[at(Phase::kFirstStep)], 2.0, 1e-6);
  EXPECT_NEAR(i.lostSeconds, 4.0, 1e-6);
  timeline.exiting(t(20.0));
  const DowntimeSummary s = timeline.summary(t(20.0));
  EXPECT_EQ(s.incidents, 1);
  EXPECT_NEAR(s.lostSeconds, 4.0, 1e-6);
  EXPECT_NEAR(s.startSeconds, 3.0, 1e-6);
  EXPECT_NEAR(s.trainingSeconds, 7.0 + 6.0, 1e-6);  // 3..10 and 14..20
  EXPECT_NEAR(s.goodput(), 13.0 / 20.0, 1e-6);
  EXPECT_EQ(describeDowntime(s),
            "1 incident, 4.0 s lost: detect 0.0, stop 0.5, restart 0.5, rendezvous 0.1, spawn "
            "0.1, process group 0.8, first step 2.0; goodput 65.0 % (13.0 s training of 20.0 s; "
            "the start took 3.0 s)");
}

TEST_F(IncidentTimelineTest, AHangIsDetectedWhenItsCulpritStoppedNotWhenItWasKilled) {
  attempt(0.0, 0);
  timeline.failed(t(40.0), 30s, "hang", "worker rank 0 hung");
  timeline.attemptEnded(t(40.2));
  attempt(41.0, 1);
  const auto ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_NEAR(*ended[1].seconds[at(Phase::kDetect)], 30.0, 1e-6);
  EXPECT_NEAR(ended[1].lostSeconds, 34.0, 1e-6);
  EXPECT_NEAR(timeline.summary(t(44.0)).trainingSeconds, 7.0, 1e-6);  // 3..10 only
}

TEST_F(IncidentTimelineTest, ARestartThatNeverTrainedEndsItsIncidentAtTheNextFailure) {
  attempt(0.0, 0, /*step=*/false);  // a startup failure: an import error
  timeline.failed(t(1.0), 0s, "worker failure", "rank 0 exited with code 1");
  timeline.attemptEnded(t(1.1));
  attempt(1.2, 1, false);
  timeline.failed(t(2.0), 0s, "worker failure", "rank 0 exited with code 1");
  auto ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 2u);  // the start and incident 1, both cut short
  EXPECT_FALSE(ended[0].complete);
  EXPECT_EQ(ended[1].number, 1);
  EXPECT_TRUE(ended[1].startup);
  EXPECT_FALSE(ended[1].complete);
  EXPECT_FALSE(ended[1].seconds[at(Phase::kFirstStep)]);
  EXPECT_NEAR(ended[1].lostSeconds, 1.0, 1e-6);
  timeline.exiting(t(2.5));
  ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_TRUE(ended[0].startup);
  EXPECT_NEAR(timeline.summary(t(2.5)).goodput(), 0.0, 1e-9);
}

TEST_F(IncidentTimelineTest, AnAttemptWithoutStepReportsTrainsFromItsProcessGroups) {
  attempt(0.0, 0, /*step=*/false);
  timeline.assumeTraining(t(300.0));
  const auto ended = timeline.takeEnded();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_TRUE(ended[0].complete);
  EXPECT_TRUE(ended[0].assumed);
  EXPECT_FALSE(ended[0].seconds[at(Phase::kFirstStep)]);
  EXPECT_NEAR(ended[0].lostSeconds, 1.0, 1e-6);
  EXPECT_TRUE(timeline.attemptTrained());
  EXPECT_NEAR(timeline.summary(t(400.0)).trainingSeconds, 399.0, 1e-6);
}

TEST_F(IncidentTimelineTest, ReportsOfAnotherAttemptOrRankAreIgnored) {
  attempt(0.0, 0, false);
  EXPECT_FALSE(timeline.stepped(t(2.0), 7));  // no such local rank
  EXPECT_TRUE(timeline.stepped(t(2.0), 1));
  EXPECT_FALSE(timeline.stepped(t(2.5), 0));  // only the attempt's first step counts
}

}  // namespace
}  // namespace ddprun::agent
