// The etcd rendezvous's state (rendezvous/etcd/src/etcd_round.h), without
// an etcd: how it keeps the round policy's values (the running round and
// each node's place in it, a fixed set of nodes (a Slurm job step's) that
// loses nodes) and the JSON that carries them. The rules themselves (order,
// blame, streaks, exclusion, the lost-node rule and their words) are the
// policy's: round_policy_test.cc.
#include "etcd_round.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ddprun::rendezvous::etcd {
namespace {

const std::string kLease = "stopped renewing its etcd lease";

// Round 1 of a MIN:MAX job running over three nodes, created by a JOIN
// with `fixedNodes` (0: not in a Slurm step).
RoundState running(std::uint32_t min, std::uint32_t max, std::uint32_t fixedNodes) {
  protocol::JoinRequest join;
  join.minNodes = min;
  join.maxNodes = max;
  join.fixedNodes = fixedNodes;
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < 3; ++i) {
    NodeInfo n;
    n.id = "node" + std::to_string(i + 1);
    n.requestedRank = i;
    n.address = "10.0.0." + std::to_string(i + 1);
    nodes.push_back(n);
  }
  return startRound(initialState(join, 1000, 7), nodes, "p1");
}

std::map<std::string, LostNode> lost(const std::string& id, const std::string& address,
                                     std::int64_t nodeRank) {
  return {{id, LostNode{address, nodeRank, kLease}}};
}

TEST(EtcdRound, ANodeThatLeftWithACodeIsLostAndOneThatFinishedIsNot) {
  EXPECT_EQ(leftExitCode(leftValue(3, 143)), 143);
  EXPECT_EQ(leftExitCode("3"), 0);  // an older ddprun's value: the round only
  EXPECT_EQ(leftExitCode("3 x"), 0);
  const std::map<std::string, std::int64_t> left = {{"done", 0}, {"stopped", 143}};
  EXPECT_EQ(lostReason(left, "done"), std::nullopt);
  EXPECT_EQ(lostReason(left, "stopped"),
            "it left the job (its ddprun exits with code 143, SIGTERM)");
  EXPECT_EQ(lostReason(left, "silent"), kLeaseLapsed);
}

TEST(EtcdRound, TheFirstJoinFixesTheSetOfNodes) {
  EXPECT_EQ(running(3, 3, 3).fixedNodes, 3u);
  EXPECT_EQ(running(3, 3, 0).fixedNodes, 0u);
}

// A Slurm step's node lost leaves 2 of 3 for a minimum of 3: the job is
// closed at once with exit code 1 and the c10d store's report, word for
// word (every other node prints it and writes it to its error file).
TEST(EtcdRound, AFixedSetFailsTheJobWhenALostNodeLeavesFewerThanItsMinimum) {
  const RoundState s = running(3, 3, 3);
  EXPECT_EQ(s.settings().fixedNodes, 3u);
  const RoundState next = loseNodes(s, lost("node3", "10.0.0.3", 2),
                                    "node node3 stopped renewing its etcd lease", 2000);
  EXPECT_EQ(next.phase, Phase::kClosed);
  EXPECT_EQ(next.failedExitCode, 1);
  EXPECT_EQ(next.failureReport,
            "ddprun: error: the job lost a node: node node3 at 10.0.0.3, node rank 2, lost "
            "(stopped renewing its etcd lease). Its nodes are a fixed set (a Slurm job step's 3), "
            "so a lost node never returns, and 2 of them are left, fewer than the minimum of 3; "
            "the job ends now instead of waiting for it.\n");
  EXPECT_EQ(next.round, 1);
  EXPECT_EQ(next.lost.size(), 1u);
}

// Above its minimum an elastic job of fixed nodes re-forms without the lost
// node (which stays counted); the next loss that leaves fewer than MIN ends
// it, naming both.
TEST(EtcdRound, AFixedElasticJobReformsUntilItFallsBelowItsMinimum) {
  const RoundState s = running(2, 3, 3);
  const RoundState formed = loseNodes(s, lost("node3", "10.0.0.3", -1),
                                      "node node3 stopped renewing its etcd lease", 2000);
  EXPECT_EQ(formed.phase, Phase::kForming);
  EXPECT_EQ(formed.endedReason, "node node3 stopped renewing its etcd lease");
  EXPECT_EQ(formed.formingSinceMs, 2000);
  EXPECT_EQ(formed.failedExitCode, 0);
  ASSERT_EQ(formed.lost.size(), 1u);
  EXPECT_EQ(formed.lost.at("node3"), (LostNode{"10.0.0.3", -1, kLease}));

  // Lost while the round forms (no round to end): the job fails.
  const RoundState failed = loseNodes(formed, lost("node2", "10.0.0.2", -1), "", 3000);
  EXPECT_EQ(failed.phase, Phase::kClosed);
  EXPECT_EQ(failed.failureReport,
            "ddprun: error: the job lost 2 nodes: node node2 at 10.0.0.2, lost (stopped renewing "
            "its etcd lease); node node3 at 10.0.0.3, lost (stopped renewing its etcd lease). Its "
            "nodes are a fixed set (a Slurm job step's 3), so a lost node never returns, and 1 of "
            "them is left, fewer than the minimum of 2; the job ends now instead of waiting for "
            "it.\n");
}

// A waiting node lost while a round runs without it (the round took MAX
// nodes) is recorded; the round goes on.
TEST(EtcdRound, ALostNodeOutsideTheRunningRoundLeavesTheRoundRunning) {
  const RoundState s = running(1, 3, 4);
  const RoundState next = loseNodes(s, lost("node4", "10.0.0.4", 3), "", 2000);
  EXPECT_EQ(next.phase, Phase::kRunning);
  EXPECT_EQ(next.round, 1);
  EXPECT_EQ(next.lost.size(), 1u);
}

TEST(EtcdRound, TheStateKeepsTheFixedSetAndItsLostNodesInJson) {
  RoundState s = running(2, 3, 3);
  s.lost = lost("node3:41:ab", "10.0.0.3", 2);
  const auto read = stateFromJson(toJson(s));
  ASSERT_TRUE(read);
  EXPECT_EQ(read->fixedNodes, 3u);
  EXPECT_EQ(read->lost, s.lost);
  // A state written before these fields: no fixed set, none lost.
  const auto old = stateFromJson(R"({"min_nodes": 2, "max_nodes": 3})");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->fixedNodes, 0u);
  EXPECT_TRUE(old->lost.empty());
}

NodeInfo node(const std::string& id, std::int64_t requestedRank, std::int64_t firstSeen,
              std::uint32_t localWorldSize = 1) {
  NodeInfo n;
  n.id = id;
  n.requestedRank = requestedRank;
  n.firstSeen = firstSeen;
  n.localWorldSize = localWorldSize;
  n.address = "10.0.0." + id.substr(id.size() - 1);
  n.masterPort = 29500 + static_cast<std::uint32_t>(firstSeen);
  return n;
}

// The running round: its number, nodes and workers, group rank 0's address
// as the master; each node's place (group rank, first global rank).
TEST(EtcdRound, ARunningRoundGivesEachNodeItsPlace) {
  protocol::JoinRequest join;
  join.minNodes = 2;
  join.maxNodes = 3;
  RoundState s = initialState(join, 1000, 7);
  s.endedReason = "a worker on node node9 failed";
  const std::vector<NodeInfo> nodes = {node("node1", -1, 1, 4), node("node2", -1, 2, 2),
                                       node("node3", -1, 3, 4)};
  const RoundState r = startRound(s, nodes, "p1");
  EXPECT_EQ(r.phase, Phase::kRunning);
  EXPECT_EQ(r.round, 1);
  EXPECT_EQ(r.publishId, "p1");
  EXPECT_EQ(r.groupWorldSize, 3u);
  EXPECT_EQ(r.worldSize, 10u);
  EXPECT_EQ(r.masterAddr, "10.0.0.1");
  EXPECT_EQ(r.masterPort, 29501u);
  EXPECT_EQ(r.endedReason, "");

  const auto records = assignments(r, nodes);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].groupRank, 1u);
  EXPECT_EQ(records[1].rankOffset, 4u);
  EXPECT_EQ(records[2].rankOffset, 6u);
  const auto place = assignmentOf(r, records[2]);
  ASSERT_TRUE(place);
  EXPECT_EQ(place->groupRank, 2u);
  EXPECT_EQ(place->rankOffset, 6u);
  EXPECT_EQ(place->worldSize, 10u);
  EXPECT_EQ(place->groupWorldSize, 3u);
  EXPECT_EQ(place->masterAddr, "10.0.0.1");

  // A record of another round, or of an earlier publication of this one,
  // is no place; nor is any record once the round ended.
  AssignRecord old = records[2];
  old.publishId = "p0";
  EXPECT_FALSE(assignmentOf(r, old));
  old = records[2];
  old.round = 0;
  EXPECT_FALSE(assignmentOf(r, old));
  const RoundState ended = endRound(r, "node node3 joined again", 5000);
  EXPECT_EQ(ended.phase, Phase::kForming);
  EXPECT_EQ(ended.endedReason, "node node3 joined again");
  EXPECT_EQ(ended.formingSinceMs, 5000);
  EXPECT_EQ(ended.round, 1);
  EXPECT_FALSE(assignmentOf(ended, records[2]));
}

// Every field the coordinator decides on survives the state's JSON.
TEST(EtcdRound, TheStateRoundTripsThroughJson) {
  RoundState s = running(2, 4, 0);
  s.lastCallMs = 3000;
  s.maxRestarts = 5;
  s.maxNodeFailures = 2;
  s.nodeCooldownMs = 60000;
  s.restarts = 3;
  s.attributedRound = 1;
  s.hosts["10.0.0.2"] = {1, 99, "node2"};
  s.lastFailure = {"node2", 1, 7, 1234, "report"};
  const auto read = stateFromJson(toJson(s));
  ASSERT_TRUE(read);
  EXPECT_EQ(toJson(*read), toJson(s));
  EXPECT_EQ(read->phase, Phase::kRunning);
  EXPECT_EQ(read->hosts, s.hosts);
  EXPECT_EQ(read->lastFailure.exitCode, 7);
  EXPECT_FALSE(stateFromJson("not json"));
  EXPECT_FALSE(stateFromJson(R"({"round": 1})"));  // no settings
}

// A failure key says whether the failure lost a peer; one an older node
// wrote (without it) did not.
TEST(EtcdRound, AFailureRecordSaysWhetherItLostAPeer) {
  const auto read = failureFromJson(toJson(FailureRecord{"10.0.0.2", 1234, true}));
  ASSERT_TRUE(read);
  EXPECT_EQ(read->address, "10.0.0.2");
  EXPECT_EQ(read->failedAtMs, 1234);
  EXPECT_TRUE(read->lostAPeer);
  const auto older = failureFromJson(R"({"address": "10.0.0.3", "failed_at_ms": 99})");
  ASSERT_TRUE(older);
  EXPECT_FALSE(older->lostAPeer);
}

}  // namespace
}  // namespace ddprun::rendezvous::etcd
