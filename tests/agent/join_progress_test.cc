// The rendezvous progress line: what a waiting node prints.
#include "join_progress.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using rendezvous::protocol::RendezvousStatus;

RendezvousStatus forming(std::uint32_t joined, std::uint32_t min, std::uint32_t max) {
  RendezvousStatus st;
  st.exists = true;
  st.joined = joined;
  st.minNodes = min;
  st.maxNodes = max;
  return st;
}

TEST(JoinProgress, ElasticJobWithItsLastCall) {
  auto st = forming(3, 2, 4);
  st.lastCallMs = 11200;
  EXPECT_EQ(formatJoinProgress(st, "h:1", 40s),
            "waiting for nodes: 3 of 4 joined (min 2), last call in 12 s (40 s)");
}

TEST(JoinProgress, StaticJobNamesTheMissingNodeRanks) {
  auto st = forming(2, 4, 4);
  st.missingCount = 2;
  st.missing = {"node rank 1", "node rank 3"};
  EXPECT_EQ(formatJoinProgress(st, "h:1", 10s),
            "waiting for nodes: 2 of 4 joined; missing: node rank 1, node rank 3 (10 s)");
}

TEST(JoinProgress, OnlyTheFirstMissingNodesAreListed) {
  auto st = forming(1, 100, 100);
  st.missingCount = 99;
  st.missing = {"node rank 1", "node rank 2"};
  EXPECT_EQ(formatJoinProgress(st, "h:1", 1s),
            "waiting for nodes: 1 of 100 joined; missing: node rank 1, node rank 2 and 97 more "
            "(1 s)");
}

TEST(JoinProgress, BeforeTheStoreAnswersAndWhileTheRoundIsFull) {
  EXPECT_EQ(formatJoinProgress(std::nullopt, "[::1]:29400", 3s),
            "waiting for the rendezvous store at [::1]:29400 (3 s)");
  RendezvousStatus none;
  EXPECT_EQ(formatJoinProgress(none, "h:1", 0s), "waiting for nodes at h:1: none joined yet (0 s)");
  auto full = forming(1, 2, 2);
  full.running = true;
  full.round = 3;
  EXPECT_EQ(formatJoinProgress(full, "h:1", 5s),
            "waiting for a free slot: round 3 runs with all 2 nodes (5 s)");
}

}  // namespace
}  // namespace ddprun::agent
