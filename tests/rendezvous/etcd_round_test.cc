// The etcd rendezvous's pure round decisions (rendezvous/etcd/src/
// etcd_round.h), without an etcd: a fixed set of nodes (a Slurm job step's)
// that loses nodes, and the state's JSON that carries it.
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

TEST(EtcdRound, TheFirstJoinFixesTheSetOfNodes) {
  EXPECT_EQ(running(3, 3, 3).fixedNodes, 3u);
  EXPECT_EQ(running(3, 3, 0).fixedNodes, 0u);
}

// A Slurm step's node lost leaves 2 of 3 for a minimum of 3: the job is
// closed at once with exit code 1 and the c10d store's report, word for
// word (every other node prints it and writes it to its error file).
TEST(EtcdRound, AFixedSetFailsTheJobWhenALostNodeLeavesFewerThanItsMinimum) {
  const RoundState s = running(3, 3, 3);
  EXPECT_FALSE(cannotReachMinimum(s));
  const RoundState next = loseNodes(s, lost("node3", "10.0.0.3", 2),
                                    "node node3 stopped renewing its etcd lease", 2000);
  EXPECT_TRUE(cannotReachMinimum(next));
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

// Outside Slurm a lost node may come back: no count of lost nodes fails
// the job.
TEST(EtcdRound, WithoutAFixedSetTheMinimumIsNeverOutOfReach) {
  RoundState s = running(3, 3, 0);
  s.lost = {{"node2", {}}, {"node3", {}}};
  EXPECT_FALSE(cannotReachMinimum(s));
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

}  // namespace
}  // namespace ddprun::rendezvous::etcd
