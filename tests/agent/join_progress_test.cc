// The rendezvous progress line: what a waiting node prints.
#include "ddprun/agent/rounds/join_progress.h"

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <sstream>
#include <thread>

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

// The lines JoinProgress prints (interval 10 ms) until it has asked for the
// status `asks` times and five intervals more, with the join's deadline set
// to `deadline` first.
std::string printedUntil(int asks, std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::ostringstream captured;
  std::streambuf* const old = std::cerr.rdbuf(captured.rdbuf());
  std::atomic<int> asked{0};
  {
    JoinProgress progress(
        [&asked]() -> std::optional<RendezvousStatus> {
          ++asked;
          return forming(1, 2, 2);
        },
        "h:1", false, 10ms);
    if (deadline) progress.setDeadline(*deadline);
    while (asked < asks) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);
  }
  std::cerr.rdbuf(old);
  return captured.str();
}

TEST(JoinProgress, SaysNothingOnceTheJoinsDeadlinePassed) {
  // A status asked for at the deadline may already show this node gone.
  EXPECT_EQ(printedUntil(1, std::chrono::steady_clock::now()), "");
  // Before the deadline, and without one, it reports every interval.
  EXPECT_NE(printedUntil(3, std::chrono::steady_clock::now() + 1h).find("1 of 2 joined"),
            std::string::npos);
  EXPECT_NE(printedUntil(3, std::nullopt).find("1 of 2 joined"), std::string::npos);
}

}  // namespace
}  // namespace ddprun::agent
