// The round policy both rendezvous backends drive (rendezvous/policy): every
// rule on plain values with a manual clock (milliseconds passed in), no
// server, no etcd. The backends' own tests (rendezvous_test.cc,
// etcd_round_test.cc, the integration tests) show that they wire it.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/round_text.h"

namespace ddprun::rendezvous::policy {
namespace {

// A manual clock: what each call is told the time is.
struct ManualClock {
  std::int64_t nowMs = 1'000'000;
  void advance(std::int64_t ms) { nowMs += ms; }
};

Settings settings(std::uint32_t min, std::uint32_t max, std::uint32_t lastCallMs = 0) {
  Settings s;
  s.minNodes = min;
  s.maxNodes = max;
  s.lastCallMs = lastCallMs;
  return s;
}

Settings excluding(std::uint32_t min, std::uint32_t max) {
  Settings s = settings(min, max);
  s.maxNodeFailures = 2;
  s.nodeCooldownMs = 60'000;
  return s;
}

Member member(const std::string& id, std::int64_t requestedRank = -1, std::int64_t firstSeen = 0,
              std::uint32_t localWorldSize = 1) {
  Member m;
  m.id = id;
  m.requestedRank = requestedRank;
  m.firstSeen = firstSeen;
  m.localWorldSize = localWorldSize;
  m.address = "10.0.0." + id.substr(id.size() - 1);
  m.masterPort = 29500 + static_cast<std::uint32_t>(firstSeen);
  return m;
}

std::vector<std::string> ids(const std::vector<Member>& members) {
  std::vector<std::string> out;
  for (const auto& m : members) out.push_back(m.id);
  return out;
}

// --- ranks ---------------------------------------------------------------------------

// Requested node ranks first (SLURM_NODEID, --node_rank), then the order of
// first arrival, then the id; at most MAX.
TEST(RoundPolicy, ARoundOrdersRequestedRanksFirstThenArrivalThenIdAndTakesAtMostMax) {
  const std::vector<Member> joined = {member("node1", -1, 5), member("node2", 1, 9),
                                      member("node5", -1, 2), member("node4", 0, 7),
                                      member("node3", -1, 2)};
  EXPECT_EQ(ids(orderRound(joined, 5)),
            (std::vector<std::string>{"node4", "node2", "node3", "node5", "node1"}));
  EXPECT_EQ(ids(orderRound(joined, 3)), (std::vector<std::string>{"node4", "node2", "node3"}));
}

// Rank offsets follow the local world sizes; group rank 0 is the master.
TEST(RoundPolicy, EachNodeIsPlacedByItsGroupRankAndTheFirstIsTheMaster) {
  const auto places = placeRound(
      {member("node1", -1, 1, 4), member("node2", -1, 2, 2), member("node3", -1, 3, 8)}, 4, 2);
  ASSERT_EQ(places.size(), 3u);
  EXPECT_EQ(places[0].rankOffset, 0u);
  EXPECT_EQ(places[1].rankOffset, 4u);
  EXPECT_EQ(places[2].rankOffset, 6u);
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(places[rank].groupRank, rank);
    EXPECT_EQ(places[rank].groupWorldSize, 3u);
    EXPECT_EQ(places[rank].worldSize, 14u);
    EXPECT_EQ(places[rank].round, 4);
    EXPECT_EQ(places[rank].restarts, 2);
    EXPECT_EQ(places[rank].masterAddr, "10.0.0.1");
    EXPECT_EQ(places[rank].masterPort, 29501u);
  }
}

// --- readiness and the last call ----------------------------------------------------

TEST(RoundPolicy, MaxNodesFormARoundAtOnce) {
  const ManualClock clock;
  EXPECT_TRUE(readiness(settings(2, 3, 5000), {3, 0, 0}, -1, clock.nowMs).ready);
}

TEST(RoundPolicy, WithoutALastCallMinNodesFormARoundAtOnce) {
  const ManualClock clock;
  EXPECT_TRUE(readiness(settings(2, 3, 0), {2, 0, 0}, -1, clock.nowMs).ready);
  EXPECT_FALSE(readiness(settings(2, 3, 0), {1, 0, 0}, -1, clock.nowMs).ready);
}

// MIN joined: the last call runs from that moment; the round forms when it
// ends, and the backend is told when to look again.
TEST(RoundPolicy, MinNodesWaitForTheLastCallThenForm) {
  ManualClock clock;
  const Settings s = settings(2, 4, 3000);
  Readiness r = readiness(s, {2, 0, 0}, -1, clock.nowMs);
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.minReachedAtMs, clock.nowMs);
  EXPECT_EQ(r.wakeAtMs, clock.nowMs + 3000);
  EXPECT_EQ(r.lastCallLeftMs, 3000);
  const std::int64_t reached = r.minReachedAtMs;
  clock.advance(1000);
  r = readiness(s, {3, 0, 0}, reached, clock.nowMs);  // a third joins: the call does not restart
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.wakeAtMs, reached + 3000);
  EXPECT_EQ(r.lastCallLeftMs, 2000);
  clock.advance(2000);
  EXPECT_TRUE(readiness(s, {3, 0, 0}, reached, clock.nowMs).ready);
}

// Below MIN the last call stops; reaching MIN again starts a whole new one
// (torchelastic sets its deadline each time the count reaches MIN).
TEST(RoundPolicy, TheLastCallStartsAgainWhenTheCountFallsBelowMinAndReachesItAgain) {
  ManualClock clock;
  const Settings s = settings(2, 4, 3000);
  Readiness r = readiness(s, {2, 0, 0}, -1, clock.nowMs);
  clock.advance(2000);
  r = readiness(s, {1, 0, 0}, r.minReachedAtMs, clock.nowMs);  // one waiting node was lost
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.minReachedAtMs, -1);
  EXPECT_EQ(r.wakeAtMs, -1);
  clock.advance(500);
  r = readiness(s, {2, 0, 0}, r.minReachedAtMs, clock.nowMs);
  EXPECT_EQ(r.wakeAtMs, clock.nowMs + 3000);
  clock.advance(1000);  // past the first call's end
  EXPECT_FALSE(readiness(s, {2, 0, 0}, r.minReachedAtMs, clock.nowMs).ready);
}

// Every node of the ended round still there is back: no last call.
TEST(RoundPolicy, TheEndedRoundsNodesAllBackFormARoundAtOnce) {
  const ManualClock clock;
  const Settings s = settings(2, 4, 3000);
  EXPECT_TRUE(readiness(s, {2, 2, 2}, -1, clock.nowMs).ready);
  EXPECT_FALSE(readiness(s, {2, 3, 2}, -1, clock.nowMs).ready);
  // None of them left (all lost): strangers wait for the last call.
  EXPECT_FALSE(readiness(s, {2, 0, 0}, -1, clock.nowMs).ready);
}

// --- the running round ----------------------------------------------------------------

TEST(RoundPolicy, AJoinEndsARunningRoundWithRoomOrWhenAParticipantJoinsAgain) {
  const Settings s = settings(2, 3);
  EXPECT_EQ(endOnJoin(s, 2, false, "node3"), "node node3 asked to join");
  EXPECT_EQ(endOnJoin(s, 3, false, "node4"), "");  // full: it waits for a slot
  EXPECT_EQ(endOnJoin(s, 3, true, "node2"), "node node2 joined again");
  EXPECT_EQ(lostText("node2", "connection closed"), "node node2 was lost (connection closed)");
}

// Each failure spends one restart of the job's budget; with none left the
// job fails.
TEST(RoundPolicy, FailuresSpendTheJobWideBudgetThenFailTheJob) {
  Settings s = settings(2, 2);
  s.maxRestarts = 2;
  FailureOutcome out = spendRestart(s, 0, "node2");
  EXPECT_TRUE(out.restartAllowed);
  EXPECT_EQ(out.restarts, 1);
  EXPECT_EQ(out.endReason, "a worker on node node2 failed (restart 1 of 2)");
  out = spendRestart(s, 1, "node1");
  EXPECT_TRUE(out.restartAllowed);
  EXPECT_EQ(out.restarts, 2);
  out = spendRestart(s, 2, "node1");
  EXPECT_FALSE(out.restartAllowed);
  EXPECT_EQ(out.restarts, 2);
  EXPECT_EQ(out.endReason, "");
}

// A crash loop's give-up fails the job with restarts left, spending none.
TEST(RoundPolicy, AGiveUpFailsTheJobWhateverTheBudget) {
  Settings s = settings(2, 2);
  s.maxRestarts = 5;
  const FailureOutcome out = spendRestart(s, 1, "node2", /*giveUp=*/true);
  EXPECT_FALSE(out.restartAllowed);
  EXPECT_EQ(out.restarts, 1);
}

// --- blame, streaks, exclusion ------------------------------------------------------------

// The earliest failure is blamed; ties go to the lower address, then the
// lower node id.
TEST(RoundPolicy, TheEarliestFailureIsBlamed) {
  EXPECT_FALSE(blame({}));
  EXPECT_EQ(blame({{"node1", "10.0.0.1", 300}, {"node3", "10.0.0.3", 100}})->node, "node3");
  EXPECT_EQ(blame({{"node3", "10.0.0.3", 100}, {"node2", "10.0.0.2", 100}})->node, "node2");
  EXPECT_EQ(blame({{"node9", "10.0.0.2", 100}, {"node8", "10.0.0.2", 100}})->node, "node8");
}

// A failure that lost a peer is a knock-on: never blamed, however early.
// If every failure of a round lost a peer (a node was lost), nobody is.
TEST(RoundPolicy, AFailureThatLostAPeerIsNeverBlamed) {
  EXPECT_EQ(blame({{"node1", "10.0.0.1", 100, true}, {"node3", "10.0.0.3", 140}})->node, "node3");
  EXPECT_FALSE(blame({{"node1", "10.0.0.1", 100, true}, {"node3", "10.0.0.3", 90, true}}));
}

// A chaos run's three rounds (seed 154, C++ workers whose knock-on failures
// come within milliseconds): a worker of host 2 is killed; host 1's agent
// is killed (hosts 2 and 3 lose a peer); host 3's worker exits 1 after
// host 2's knock-on failure was reported. Host 2 was left out for all
// three; only the first was its own.
TEST(RoundPolicy, KnockOnFailuresNeverAddUpToAnExclusion) {
  const ManualClock clock;
  const Settings s = excluding(2, 3);
  std::map<std::string, HostRecord> hosts;
  const std::set<std::string> round = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  const std::vector<Member> waiting = {member("node1"), member("node2"), member("node3")};
  Attribution a =
      attributeFailures(s, hosts, round, {{"node2", "10.0.0.2", 1000}}, waiting, clock.nowMs);
  EXPECT_EQ(a.blamed, "10.0.0.2");
  a = attributeFailures(s, hosts, round,
                        {{"node2", "10.0.0.2", 2000, true}, {"node3", "10.0.0.3", 2001, true}},
                        waiting, clock.nowMs);
  EXPECT_EQ(a.blamed, "");
  EXPECT_EQ(hosts.at("10.0.0.2").streak, 1);
  a = attributeFailures(s, hosts, round,
                        {{"node2", "10.0.0.2", 3000, true}, {"node3", "10.0.0.3", 3040}}, waiting,
                        clock.nowMs);
  EXPECT_EQ(a.blamed, "10.0.0.3");
  EXPECT_FALSE(a.exclusion);
  EXPECT_EQ(hosts, (std::map<std::string, HostRecord>{{"10.0.0.3", {1, 0, "node3"}}}));
}

// The blamed host's streak grows; the round's other hosts start again from
// 0 (and, with nothing to remember, are dropped); hosts not in the round
// keep theirs.
TEST(RoundPolicy, StreaksCountOnlyTheRoundsHosts) {
  const ManualClock clock;
  std::map<std::string, HostRecord> hosts = {{"10.0.0.1", {2, 0, "node1"}},
                                             {"10.0.0.9", {1, 0, "node9"}}};
  const std::set<std::string> round = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  Attribution a = attributeFailures(
      excluding(1, 3), hosts, round,
      {{"node1", "10.0.0.1", 300}, {"node3", "10.0.0.3", 100}, {"node2", "10.0.0.2", 100}}, {},
      clock.nowMs);
  EXPECT_EQ(a.blamed, "10.0.0.2");
  EXPECT_EQ(a.streak, 1);
  EXPECT_FALSE(a.exclusion);
  EXPECT_EQ(hosts, (std::map<std::string, HostRecord>{{"10.0.0.2", {1, 0, "node2"}},
                                                      {"10.0.0.9", {1, 0, "node9"}}}));
  a = attributeFailures(excluding(1, 3), hosts, round, {{"node2", "10.0.0.2", 50}}, {},
                        clock.nowMs);
  EXPECT_EQ(hosts.at("10.0.0.2").streak, 2);
  // A round ended by a membership change blames nobody and changes nothing.
  a = attributeFailures(excluding(1, 3), hosts, round, {}, {}, clock.nowMs);
  EXPECT_EQ(a.blamed, "");
  EXPECT_EQ(hosts.at("10.0.0.2").streak, 2);
  // A static job keeps no streaks (nobody can be left out).
  a = attributeFailures(excluding(3, 3), hosts, round, {{"node2", "10.0.0.2", 50}}, {},
                        clock.nowMs);
  EXPECT_EQ(a.blamed, "10.0.0.2");
  EXPECT_EQ(hosts.at("10.0.0.2").streak, 2);
}

// At max_node_failures rounds in a row the host is left out for its
// cooldown, when MIN nodes wait on other hosts; its streak is kept (its
// refusals name it) until the cooldown ends.
TEST(RoundPolicy, AHostAtItsLimitIsExcludedWhenMinNodesWaitWithoutIt) {
  ManualClock clock;
  const Settings s = excluding(2, 3);
  std::map<std::string, HostRecord> hosts = {{"10.0.0.3", {1, 0, "node3"}}};
  const std::vector<Member> waiting = {member("node1"), member("node2"), member("node3")};
  const Attribution a = attributeFailures(s, hosts, {"10.0.0.1", "10.0.0.2", "10.0.0.3"},
                                          {{"node3", "10.0.0.3", 10}}, waiting, clock.nowMs);
  ASSERT_TRUE(a.exclusion);
  EXPECT_EQ(*a.exclusion, (Exclusion{"10.0.0.3", "node3", 2, clock.nowMs + 60'000}));
  EXPECT_TRUE(excluded(hosts, "10.0.0.3", clock.nowMs));
  EXPECT_FALSE(excluded(hosts, "10.0.0.1", clock.nowMs));
  EXPECT_EQ(nextCooldownEnd(hosts), clock.nowMs + 60'000);
  EXPECT_EQ(exclusionText("job", s, *a.exclusion),
            "node node3 at 10.0.0.3 is excluded from rendezvous 'job' for 60 s: its workers failed "
            "first in 2 rounds in a row (rdzv_conf max_node_failures=2)");
  // A JOIN from there is refused with the seconds left, rounded up.
  clock.advance(1);
  EXPECT_EQ(refusalText("job", s, "node3:41:ab", "10.0.0.3", hosts.at("10.0.0.3"), clock.nowMs),
            "node node3:41:ab at 10.0.0.3 is excluded from rendezvous 'job' for 60 more s: its "
            "workers failed first in 2 rounds in a row");
  clock.advance(59'000);
  EXPECT_NE(refusalText("job", s, "n", "10.0.0.3", hosts.at("10.0.0.3"), clock.nowMs)
                .find("for 1 more s"),
            std::string::npos);  // 999 ms left
  // The cooldown ends: readmitted with a clean slate.
  EXPECT_TRUE(readmit(hosts, clock.nowMs).empty());
  clock.advance(999);
  EXPECT_EQ(readmit(hosts, clock.nowMs), (std::vector<std::string>{"10.0.0.3"}));
  EXPECT_FALSE(excluded(hosts, "10.0.0.3", clock.nowMs));
  EXPECT_TRUE(hosts.empty());
  EXPECT_EQ(nextCooldownEnd(hosts), -1);
  EXPECT_EQ(readmittedText("job", "10.0.0.3"),
            "the cooldown of 10.0.0.3 in rendezvous 'job' ended: it may join again");
}

// Fewer than MIN would wait without it: the host stays (and keeps its
// streak); a static job or max_node_failures=0 never excludes.
TEST(RoundPolicy, AHostStaysWhenExcludingItWouldLeaveFewerThanMin) {
  const ManualClock clock;
  const std::vector<Member> waiting = {member("node1"), member("node3")};
  std::map<std::string, HostRecord> hosts = {{"10.0.0.3", {1, 0, "node3"}}};
  Attribution a = attributeFailures(excluding(2, 3), hosts, {"10.0.0.1", "10.0.0.3"},
                                    {{"node3", "10.0.0.3", 10}}, waiting, clock.nowMs);
  EXPECT_FALSE(a.exclusion);
  EXPECT_TRUE(a.stays);
  EXPECT_EQ(a.streak, 2);
  EXPECT_EQ(staysText("job", a.blamed, a.streak, 2),
            "Rendezvous 'job': 10.0.0.3 failed first in 2 rounds in a row but stays: without it "
            "fewer than 2 nodes are waiting");
  hosts = {{"10.0.0.3", {5, 0, "node3"}}};
  a = attributeFailures(excluding(3, 3), hosts, {"10.0.0.3"}, {{"node3", "10.0.0.3", 10}},
                        {member("node1"), member("node2"), member("node4"), member("node3")},
                        clock.nowMs);
  EXPECT_FALSE(a.exclusion);
  EXPECT_FALSE(a.stays);
  Settings never = excluding(1, 3);
  never.maxNodeFailures = 0;
  a = attributeFailures(never, hosts, {"10.0.0.3"}, {{"node3", "10.0.0.3", 10}},
                        {member("node1"), member("node2")}, clock.nowMs);
  EXPECT_FALSE(a.exclusion);
}

// --- forming a round ------------------------------------------------------------------------

// Not ready: nothing is blamed yet; the backend wakes at the last call's end.
TEST(RoundPolicy, FormRoundWaitsForTheLastCallBeforeBlaming) {
  ManualClock clock;
  FormInput in;
  in.settings = excluding(2, 4);
  in.settings.lastCallMs = 3000;
  in.round = 1;
  in.joining = {member("node1", -1, 1), member("node2", -1, 2)};
  in.failures = {{"node3", "10.0.0.3", 5}};
  Formation f = formRound(in, clock.nowMs);
  EXPECT_FALSE(f.form);
  EXPECT_FALSE(f.attributed);
  EXPECT_EQ(f.wakeAtMs, clock.nowMs + 3000);
  EXPECT_EQ(f.lastCallLeftMs, 3000);
  in.minReachedAtMs = f.minReachedAtMs;
  clock.advance(3000);
  f = formRound(in, clock.nowMs);
  EXPECT_TRUE(f.form);
  EXPECT_TRUE(f.attributed);
  EXPECT_EQ(f.attribution.blamed, "10.0.0.3");
  EXPECT_EQ(f.hosts.at("10.0.0.3").streak, 1);
  EXPECT_EQ(ids(f.participants), (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(f.minReachedAtMs, -1);
}

// Ready: the repeat offender is excluded, its waiting node left out of the
// round, and the backend wakes when its cooldown ends.
TEST(RoundPolicy, FormRoundExcludesARepeatOffenderAndFormsWithoutIt) {
  ManualClock clock;
  FormInput in;
  in.settings = excluding(2, 3);
  in.round = 2;
  in.hosts = {{"10.0.0.3", {1, 0, "node3"}}};
  in.joining = {member("node3", -1, 1), member("node1", -1, 2), member("node2", -1, 3)};
  in.expected = 3;
  in.expectedBack = 3;
  in.roundHosts = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  in.failures = {{"node3", "10.0.0.3", 5}, {"node1", "10.0.0.1", 9}};
  Formation f = formRound(in, clock.nowMs);
  ASSERT_TRUE(f.form);
  ASSERT_TRUE(f.attribution.exclusion);
  EXPECT_EQ(f.attribution.exclusion->address, "10.0.0.3");
  EXPECT_EQ(ids(f.participants), (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(f.wakeAtMs, clock.nowMs + 60'000);
  // Later, a node of the excluded host still waiting does not count.
  in.hosts = f.hosts;
  in.round = 3;
  in.failures.clear();
  in.expected = 2;
  in.expectedBack = 1;
  in.joining = {member("node3", -1, 1), member("node1", -1, 2)};
  clock.advance(1000);
  f = formRound(in, clock.nowMs);
  EXPECT_FALSE(f.form);
  EXPECT_EQ(f.minReachedAtMs, -1);
}

// --- lost nodes -------------------------------------------------------------------------------

// In a fixed set a lost node never returns: the job fails once fewer than
// MIN can be left; outside one, no count of lost nodes does.
TEST(RoundPolicy, AFixedSetCannotReachItsMinimumOnceTooManyAreLost) {
  Settings s = settings(2, 3);
  s.fixedNodes = 3;
  EXPECT_FALSE(cannotReachMinimum(s, 1));
  EXPECT_TRUE(cannotReachMinimum(s, 2));
  EXPECT_FALSE(cannotReachMinimum(settings(2, 3), 5));
  const std::map<std::string, LostNode> lost = {
      {"node2", {"10.0.0.2", -1, "connection closed"}},
      {"node3", {"10.0.0.3", 2, "stopped renewing its etcd lease"}}};
  EXPECT_EQ(lostNodesReport(s, lost),
            "ddprun: error: the job lost 2 nodes: node node2 at 10.0.0.2, lost (connection "
            "closed); node node3 at 10.0.0.3, node rank 2, lost (stopped renewing its etcd lease). "
            "Its nodes are a fixed set (a Slurm job step's 3), so a lost node never returns, and 1 "
            "of them is left, fewer than the minimum of 2; the job ends now instead of waiting for "
            "it.\n");
}

// A node that joins with a lost node's id or node rank replaces it.
TEST(RoundPolicy, ANodeThatJoinsWithALostNodesIdOrRankReplacesIt) {
  std::map<std::string, LostNode> lost = {{"node2", {"10.0.0.2", -1, "x"}},
                                          {"node3", {"10.0.0.3", 2, "x"}},
                                          {"node4", {"10.0.0.4", 3, "x"}}};
  releaseLost(lost, member("node2"));
  EXPECT_FALSE(lost.contains("node2"));
  releaseLost(lost, member("node9", 2));
  EXPECT_FALSE(lost.contains("node3"));
  EXPECT_TRUE(lost.contains("node4"));
}

// --- what a waiting node is told -----------------------------------------------------------------

// Lost nodes first, then the ended round's nodes not back yet (their
// requested node rank, else their group rank), then node ranks nobody took.
TEST(RoundPolicy, TheMissingNodesAreTheLostThenTheNotBackThenTheRanksNobodyTook) {
  protocol::RendezvousStatus st;
  st.joined = 1;
  st.minNodes = st.maxNodes = 4;
  describeMissing(settings(4, 4), {{"node3", {"10.0.0.3", 2, "connection closed"}}},
                  {{member("node2", 1), 1}, {member("node3", 2), 2}}, {member("node1", 0)}, st);
  EXPECT_EQ(st.missingCount, 3u);
  EXPECT_EQ(st.missing, (std::vector<std::string>{
                            "node node3 at 10.0.0.3, node rank 2, lost (connection closed)",
                            "node node2 at 10.0.0.2, node rank 1, not back yet", "node rank 3"}));
  EXPECT_EQ(joinTimeoutText("job", st),
            "rendezvous 'job' did not complete: 1 of 4 nodes joined; missing: node node3 at "
            "10.0.0.3, node rank 2, lost (connection closed), node node2 at 10.0.0.2, node rank 1, "
            "not back yet, node rank 3");
  // An elastic node not back, with no rank of its own: its group rank.
  protocol::RendezvousStatus elastic;
  describeMissing(settings(2, 4), {}, {{member("node5"), 3}}, {member("node1")}, elastic);
  EXPECT_EQ(elastic.missing,
            (std::vector<std::string>{"node node5 at 10.0.0.5, node rank 3, not back yet"}));
  // Elastic growth: nothing is known to be missing.
  protocol::RendezvousStatus growth;
  describeMissing(settings(2, 4), {}, {}, {member("node1")}, growth);
  EXPECT_EQ(growth.missingCount, 0u);
}

TEST(RoundPolicy, MoreMissingNodesThanShownAreCounted) {
  protocol::RendezvousStatus st;
  describeMissing(settings(40, 40), {}, {}, {member("node1", 0)}, st);
  EXPECT_EQ(st.missingCount, 39u);
  EXPECT_EQ(st.missing.size(), protocol::kMaxMissingShown);
  EXPECT_NE(protocol::missingNodesText(st).find("and 23 more"), std::string::npos);
}

// --- settings
// --------------------------------------------------------------------------------------

TEST(RoundPolicy, EveryNodeMustAskForTheSameNodesAndBudget) {
  protocol::JoinRequest first;
  first.minNodes = 2;
  first.maxNodes = 3;
  first.maxRestarts = 3;
  const Settings s = settingsOf(first);
  EXPECT_EQ(settingsMismatch("job", s, first), "");
  protocol::JoinRequest other = first;
  other.maxNodes = 4;
  EXPECT_EQ(settingsMismatch("job", s, other),
            "rendezvous 'job' is for 2:3 nodes but this node asked for 2:4; give every node the "
            "same --nnodes");
  other = first;
  other.maxRestarts = 1000;
  EXPECT_EQ(settingsMismatch("job", s, other),
            "rendezvous 'job' has a budget of 3 restarts but this node asked for 1000; give every "
            "node the same --max_restarts");
  // Normalised: MIN at least 1, MAX at least MIN, no negative budget.
  protocol::JoinRequest odd;
  odd.minNodes = 0;
  odd.maxNodes = 0;
  odd.maxRestarts = -1;
  EXPECT_EQ(settingsOf(odd), settings(1, 1));
  EXPECT_EQ(rankTaken(1, "node2"),
            "node rank 1 is already taken by node node2; give every node its own --node_rank");
}

}  // namespace
}  // namespace ddprun::rendezvous::policy
