// Server-side rendezvous rounds over the real server and clients.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_server.h"
#include "wait_until.h"

namespace ddprun::rendezvous {
namespace {

using namespace std::chrono_literals;
using protocol::Assignment;
using protocol::EventType;
using protocol::JoinRequest;

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreServerOptions options;
    options.token = "t";
    server_ = std::make_unique<StoreServer>(options);
    server_->start();
  }

  std::unique_ptr<RendezvousClient> client(const std::string& name) {
    StoreClientOptions options;
    options.port = server_->port();
    options.token = "t";
    options.name = name;
    return std::make_unique<RendezvousClient>(options);
  }

  static JoinRequest request(const std::string& node, std::uint32_t min, std::uint32_t max,
                             std::uint32_t localWorldSize = 1, std::int64_t nodeRank = -1) {
    JoinRequest j;
    j.rdzvId = "job";
    j.nodeId = node;
    j.minNodes = min;
    j.maxNodes = max;
    j.localWorldSize = localWorldSize;
    j.nodeRank = nodeRank;
    j.lastCallMs = 200;
    j.address = "10.0.0." + node.substr(node.size() - 1);
    j.masterPort = 20000 + static_cast<std::uint32_t>(node.back());
    j.maxRestarts = 1;
    return j;
  }

  // A Slurm job step's three nodes.
  static JoinRequest fixed(JoinRequest j) {
    j.fixedNodes = 3;
    return j;
  }

  // a, b and c form round 1 with `requests`; then c's connection closes
  // (its agent killed). The event each of a and b is pushed next.
  static std::vector<protocol::Event> formThenLoseTheThird(
      RendezvousClient& a, RendezvousClient& b, std::unique_ptr<RendezvousClient>& c,
      const std::vector<JoinRequest>& requests) {
    auto fa = std::async(std::launch::async, [&] { return a.join(requests[0], 10s); });
    auto fb = std::async(std::launch::async, [&] { return b.join(requests[1], 10s); });
    c->join(requests[2], 10s);
    fa.get();
    fb.get();
    c.reset();
    std::vector<protocol::Event> events;
    for (auto* node : {&a, &b}) {
      if (auto event = node->waitEvent(5s)) events.push_back(*event);
    }
    return events;
  }

  // The status of rendezvous "job" once `joined` nodes wait in it (the last
  // one read, if that takes over 10 s).
  static protocol::RendezvousStatus statusOnceJoined(RendezvousClient& watcher,
                                                     std::uint32_t joined) {
    protocol::RendezvousStatus st;
    harness::waitUntil([&] {
      st = watcher.status("job");
      return st.joined >= joined;
    });
    return st;
  }

  // Until `joined` nodes wait in rendezvous "job" (as the server sees it):
  // how a test orders the nodes' arrivals.
  void waitJoined(std::uint32_t joined) {
    if (!watcher_) watcher_ = client("arrivals");
    statusOnceJoined(*watcher_, joined);
  }

  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<RendezvousClient> watcher_;
};

TEST_F(RendezvousTest, RanksFollowArrivalAndOffsetsFollowLocalWorldSizes) {
  auto a = client("a"), b = client("b"), c = client("c");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 3, 3, 4), 10s); });
  waitJoined(1);
  auto fb = std::async(std::launch::async, [&] { return b->join(request("node2", 3, 3, 2), 10s); });
  waitJoined(2);
  const Assignment rc = c->join(request("node3", 3, 3, 8), 10s);
  const Assignment ra = fa.get(), rb = fb.get();
  EXPECT_EQ(ra.groupRank, 0u);
  EXPECT_EQ(rb.groupRank, 1u);
  EXPECT_EQ(rc.groupRank, 2u);
  EXPECT_EQ(ra.rankOffset, 0u);
  EXPECT_EQ(rb.rankOffset, 4u);
  EXPECT_EQ(rc.rankOffset, 6u);
  for (const auto& r : {ra, rb, rc}) {
    EXPECT_EQ(r.worldSize, 14u);
    EXPECT_EQ(r.groupWorldSize, 3u);
    EXPECT_EQ(r.round, 1);
    EXPECT_EQ(r.masterAddr, "10.0.0.1");
    EXPECT_EQ(r.masterPort, 20000u + '1');
  }
}

TEST_F(RendezvousTest, RequestedNodeRanksWin) {
  auto a = client("a"), b = client("b");
  auto fa =
      std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2, 1, 1), 10s); });
  waitJoined(1);
  const Assignment rb = b->join(request("node2", 2, 2, 1, 0), 10s);
  EXPECT_EQ(rb.groupRank, 0u);
  EXPECT_EQ(fa.get().groupRank, 1u);
  EXPECT_EQ(rb.masterAddr, "10.0.0.2");
}

TEST_F(RendezvousTest, DuplicateNodeRankIsRefused) {
  auto a = client("a"), b = client("b");
  auto fa =
      std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2, 1, 0), 2s); });
  waitJoined(1);
  try {
    b->join(request("node2", 2, 2, 1, 0), 2s);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("node rank 0 is already taken"), std::string::npos);
  }
  EXPECT_THROW(fa.get(), TimeoutError);
}

TEST_F(RendezvousTest, MinNodesCompleteAfterLastCall) {
  auto a = client("a"), b = client("b");
  const auto start = std::chrono::steady_clock::now();
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 4), 10s); });
  const Assignment rb = b->join(request("node2", 2, 4), 10s);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
  EXPECT_EQ(rb.groupWorldSize, 2u);
  EXPECT_EQ(fa.get().groupWorldSize, 2u);
}

TEST_F(RendezvousTest, JoinTimesOut) {
  auto a = client("a");
  EXPECT_THROW(a->join(request("node1", 2, 2), 200ms), TimeoutError);
}

TEST_F(RendezvousTest, StatusSaysWhoHasJoinedAndWhoIsMissing) {
  auto a = client("a"), b = client("b"), watcher = client("watcher");
  EXPECT_FALSE(watcher->status("job").exists);
  // A static job of 3 nodes: node ranks 0 and 2 wait, so rank 1 is missing.
  auto fa =
      std::async(std::launch::async, [&] { return a->join(request("node1", 3, 3, 1, 0), 2s); });
  auto fb =
      std::async(std::launch::async, [&] { return b->join(request("node2", 3, 3, 1, 2), 2500ms); });
  protocol::RendezvousStatus st = statusOnceJoined(*watcher, 2);
  EXPECT_TRUE(st.exists);
  EXPECT_FALSE(st.running);
  EXPECT_EQ(st.round, 0);
  EXPECT_EQ(st.joined, 2u);
  EXPECT_EQ(st.minNodes, 3u);
  EXPECT_EQ(st.maxNodes, 3u);
  EXPECT_EQ(st.lastCallMs, -1);
  EXPECT_EQ(st.missingCount, 1u);
  EXPECT_EQ(st.missing, (std::vector<std::string>{"node rank 1"}));
  // The timeouts say the same (the second one after the first node gave up).
  const auto timeoutMessage = [](std::future<Assignment>& join) {
    try {
      join.get();
    } catch (const TimeoutError& e) {
      return std::string(e.what());
    }
    return std::string("no timeout");
  };
  const std::string first = timeoutMessage(fa), second = timeoutMessage(fb);
  EXPECT_NE(first.find("2 of 3 nodes joined; missing: node rank 1"), std::string::npos) << first;
  // The first gave up: named so (it is no node that never came).
  EXPECT_NE(second.find("1 of 3 nodes joined; missing: node node1 at 10.0.0.1, node rank 0, "
                        "lost (it stopped waiting: its join timed out), node rank 1"),
            std::string::npos)
      << second;
}

TEST_F(RendezvousTest, StatusCountsDownTheLastCallAndNamesNodesNotBack) {
  auto a = client("a"), b = client("b"), c = client("c"), watcher = client("watcher");
  auto slow = [](JoinRequest j) {
    j.lastCallMs = 3000;
    return j;
  };
  auto fa =
      std::async(std::launch::async, [&] { return a->join(slow(request("node1", 2, 3)), 10s); });
  statusOnceJoined(*watcher, 1);
  auto fb =
      std::async(std::launch::async, [&] { return b->join(slow(request("node2", 2, 3)), 10s); });
  protocol::RendezvousStatus st = statusOnceJoined(*watcher, 2);
  EXPECT_EQ(st.joined, 2u);
  EXPECT_GT(st.lastCallMs, 2000);  // min joined: the last call runs
  EXPECT_LE(st.lastCallMs, 3000);
  EXPECT_EQ(st.missingCount, 0u);              // elastic growth: nobody is known to be missing
  c->join(slow(request("node3", 2, 3)), 10s);  // max: complete at once
  fa.get();
  fb.get();
  EXPECT_TRUE(watcher->status("job").running);
  // node3 fails: the round ends and node1 and node2 are expected back.
  protocol::NodeReport report;
  report.rdzvId = "job";
  report.nodeId = "node3";
  report.round = 1;
  report.maxRestarts = 1;
  EXPECT_EQ(c->reportFailure(report).restarts, 1);
  auto fc =
      std::async(std::launch::async, [&] { return c->join(slow(request("node3", 2, 3)), 10s); });
  st = statusOnceJoined(*watcher, 1);
  EXPECT_FALSE(st.running);
  EXPECT_EQ(st.joined, 1u);
  EXPECT_EQ(st.missingCount, 2u);
  EXPECT_EQ(st.missing,
            (std::vector<std::string>{"node node1 at 10.0.0.1, node rank 0, not back yet",
                                      "node node2 at 10.0.0.2, node rank 1, not back yet"}));
  auto fa2 =
      std::async(std::launch::async, [&] { return a->join(slow(request("node1", 2, 3)), 10s); });
  b->join(slow(request("node2", 2, 3)), 10s);
  fa2.get();
  fc.get();
}

TEST_F(RendezvousTest, LateJoinerEndsTheRoundAndSurvivorsKeepTheirOrder) {
  auto a = client("a"), b = client("b"), c = client("c");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 3), 10s); });
  waitJoined(1);
  b->join(request("node2", 2, 3), 10s);
  EXPECT_EQ(fa.get().round, 1);
  // A third node arrives while round 1 runs.
  auto fc = std::async(std::launch::async, [&] { return c->join(request("node3", 2, 3), 10s); });
  for (auto* node : {a.get(), b.get()}) {
    auto event = node->waitEvent(5s);
    ASSERT_TRUE(event);
    EXPECT_EQ(event->type, EventType::kRoundEnded);
    EXPECT_EQ(event->round, 1);
    EXPECT_NE(event->message.find("node3 asked to join"), std::string::npos);
  }
  auto fa2 = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 3), 10s); });
  const Assignment b2 = b->join(request("node2", 2, 3), 10s);
  const Assignment a2 = fa2.get(), c2 = fc.get();
  EXPECT_EQ(a2.round, 2);
  EXPECT_EQ(a2.groupRank, 0u);
  EXPECT_EQ(b2.groupRank, 1u);
  EXPECT_EQ(c2.groupRank, 2u);
  EXPECT_EQ(c2.groupWorldSize, 3u);
  EXPECT_EQ(a2.restarts, 0);  // membership changes spend no restarts
}

TEST_F(RendezvousTest, LostNodeEndsTheRoundForTheOthers) {
  auto a = client("a"), b = client("b"), c = client("c");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 3), 10s); });
  auto fb = std::async(std::launch::async, [&] { return b->join(request("node2", 2, 3), 10s); });
  waitJoined(2);
  c->join(request("node3", 2, 3), 10s);
  fa.get();
  fb.get();
  c.reset();  // node3's connection closes
  for (auto* node : {a.get(), b.get()}) {
    auto event = node->waitEvent(5s);
    ASSERT_TRUE(event);
    EXPECT_NE(event->message.find("node node3 was lost"), std::string::npos) << event->message;
  }
  auto fa2 = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 3), 10s); });
  const auto start = std::chrono::steady_clock::now();
  const Assignment b2 = b->join(request("node2", 2, 3), 10s);
  // Everyone expected back has rejoined: no last-call wait.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_EQ(b2.groupWorldSize, 2u);
  EXPECT_EQ(fa2.get().round, 2);
}

// A Slurm job step's nodes (fixedNodes): a lost node never returns, so a
// job that can no longer reach MIN fails at once, naming the lost node,
// instead of waiting for it until the join timeout.
TEST_F(RendezvousTest, AFixedSetOfNodesFailsTheJobWhenANodeIsLost) {
  auto a = client("a"), b = client("b"), c = client("c");
  const auto events = formThenLoseTheThird(
      *a, *b, c,
      {fixed(request("node1", 3, 3, 1, 0)), fixed(request("node2", 3, 3, 1, 1)),
       fixed(request("node3", 3, 3, 1, 2))});
  ASSERT_EQ(events.size(), 2u);
  for (const auto& event : events) {
    EXPECT_EQ(event.type, EventType::kJobFailed);
    EXPECT_EQ(event.exitCode, 1);
    EXPECT_NE(event.message.find("node node3 at 10.0.0.3, node rank 2, lost ("), std::string::npos)
        << event.message;
    EXPECT_NE(event.message.find("2 of them are left, fewer than the minimum of 3"),
              std::string::npos)
        << event.message;
  }
  // The job is over: a JOIN is answered CLOSED with the same report.
  try {
    a->join(fixed(request("node1", 3, 3, 1, 0)), 5s);
    ADD_FAILURE() << "joined a failed job";
  } catch (const RendezvousClosedError& e) {
    EXPECT_NE(e.report().find("node node3 at 10.0.0.3"), std::string::npos) << e.report();
  }
}

// A node that LEAVEs with a failure's code while the round runs (its agent
// got SIGTERM) ends the round at once, and the others, waiting for it
// again, name it as the node that left; a LEAVE with 0 (its workers done)
// ends nothing.
TEST_F(RendezvousTest, ANodeThatLeavesDuringTheJobIsNamedToTheOthers) {
  auto a = client("a"), b = client("b"), c = client("c"), watcher = client("watcher");
  std::vector<JoinRequest> requests = {request("node1", 3, 3, 1, 0), request("node2", 3, 3, 1, 1),
                                       request("node3", 3, 3, 1, 2)};
  auto fa = std::async(std::launch::async, [&] { return a->join(requests[0], 10s); });
  auto fb = std::async(std::launch::async, [&] { return b->join(requests[1], 10s); });
  c->join(requests[2], 10s);
  fa.get();
  fb.get();
  protocol::NodeReport left;
  left.rdzvId = "job";
  left.nodeId = "node3";
  left.round = 1;
  left.exitCode = 128 + 15;
  c->leave(left);
  for (auto* node : {a.get(), b.get()}) {
    const auto event = node->waitEvent(5s);
    ASSERT_TRUE(event);
    EXPECT_EQ(event->type, EventType::kRoundEnded);
    EXPECT_EQ(event->message,
              "node node3 was lost (it left the job (its ddprun exits with code 143, SIGTERM))");
  }
  auto fa2 = std::async(std::launch::async, [&] { return a->join(requests[0], 10s); });
  auto fb2 = std::async(std::launch::async, [&] { return b->join(requests[1], 10s); });
  protocol::RendezvousStatus st = statusOnceJoined(*watcher, 2);
  ASSERT_EQ(st.joined, 2u);
  EXPECT_EQ(st.missing,
            (std::vector<std::string>{"node node3 at 10.0.0.3, node rank 2, lost (it left the job "
                                      "(its ddprun exits with code 143, SIGTERM))"}));
  // It comes back (a scheduler restarted it): round 2 forms.
  EXPECT_EQ(c->join(requests[2], 10s).round, 2);
  fa2.get();
  fb2.get();
  // Done: a LEAVE with 0 tells nobody anything.
  left.round = 2;
  left.exitCode = 0;
  c->leave(left);
  EXPECT_FALSE(a->waitEvent(300ms).has_value());
}

// Once a node's workers all finished (LEAVE 0), a failure of that round on
// another node (a crash in its teardown) is not restarted: the finished node
// will not rejoin. Either order: the failure after the LEAVE is refused a
// restart; a LEAVE after the failure closes the job for the node waiting
// to rejoin, with the failure's report.
TEST_F(RendezvousTest, AFailureAfterAnotherNodeFinishedEndsTheJobWithThatFailure) {
  for (const bool leaveFirst : {true, false}) {
    SCOPED_TRACE(leaveFirst ? "leave, then failure" : "failure, then leave");
    server_->stop();
    SetUp();
    auto a = client("a"), b = client("b");
    JoinRequest ra = request("node1", 2, 2), rb = request("node2", 2, 2);
    ra.maxRestarts = rb.maxRestarts = 3;
    auto fa = std::async(std::launch::async, [&] { return a->join(ra, 10s); });
    ASSERT_EQ(b->join(rb, 10s).round, 1);
    fa.get();
    protocol::NodeReport done;
    done.rdzvId = "job";
    done.nodeId = "node1";
    done.round = 1;
    protocol::NodeReport failed = done;
    failed.nodeId = "node2";
    failed.exitCode = 139;
    failed.report = "rank 3 died of SIGSEGV\n";
    if (leaveFirst) {
      a->leave(done);
      EXPECT_FALSE(b->reportFailure(failed).restartAllowed);
    } else {
      EXPECT_TRUE(b->reportFailure(failed).restartAllowed);
      auto rejoin = std::async(std::launch::async, [&] { return b->join(rb, 10s); });
      a->leave(done);
      try {
        rejoin.get();
        ADD_FAILURE() << "joined a job that cannot re-form";
      } catch (const RendezvousClosedError& e) {
        EXPECT_EQ(e.exitCode(), 139);
        EXPECT_NE(e.report().find("rank 3 died of SIGSEGV\nddprun: not restarting: the workers "
                                  "of node node1 had already finished"),
                  std::string::npos)
            << e.report();
      }
    }
    const auto st = b->status("job", true);
    EXPECT_TRUE(st.closed);
  }
}

// Above its minimum an elastic job of fixed nodes re-forms without the lost
// node; the next loss that leaves fewer than MIN ends it.
TEST_F(RendezvousTest, AFixedElasticJobReformsUntilItFallsBelowItsMinimum) {
  auto a = client("a"), b = client("b"), c = client("c");
  const auto events =
      formThenLoseTheThird(*a, *b, c,
                           {fixed(request("node1", 2, 3)), fixed(request("node2", 2, 3)),
                            fixed(request("node3", 2, 3))});
  ASSERT_EQ(events.size(), 2u);
  for (const auto& event : events) EXPECT_EQ(event.type, EventType::kRoundEnded) << event.message;
  auto fa2 =
      std::async(std::launch::async, [&] { return a->join(fixed(request("node1", 2, 3)), 10s); });
  EXPECT_EQ(b->join(fixed(request("node2", 2, 3)), 10s).groupWorldSize, 2u);
  EXPECT_EQ(fa2.get().round, 2);
  b.reset();
  auto event = a->waitEvent(5s);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, EventType::kJobFailed) << event->message;
  EXPECT_NE(event->message.find("the job lost 2 nodes: node node2 at 10.0.0.2, lost ("),
            std::string::npos)
      << event->message;
  EXPECT_NE(event->message.find("node node3 at 10.0.0.3, lost ("), std::string::npos)
      << event->message;
}

// Without a fixed set the lost node may come back: the survivors wait, and
// their progress lines name the lost node first.
TEST_F(RendezvousTest, StatusNamesALostNodeWithItsAddressAndRank) {
  auto a = client("a"), b = client("b"), c = client("c"), watcher = client("watcher");
  const auto events = formThenLoseTheThird(
      *a, *b, c,
      {request("node1", 3, 3, 1, 0), request("node2", 3, 3, 1, 1), request("node3", 3, 3, 1, 2)});
  ASSERT_EQ(events.size(), 2u);
  for (const auto& event : events) EXPECT_EQ(event.type, EventType::kRoundEnded);
  auto fa2 =
      std::async(std::launch::async, [&] { return a->join(request("node1", 3, 3, 1, 0), 2s); });
  protocol::RendezvousStatus st = statusOnceJoined(*watcher, 1);
  ASSERT_EQ(st.joined, 1u);
  ASSERT_EQ(st.missingCount, 2u);
  EXPECT_TRUE(st.missing[0].starts_with("node node3 at 10.0.0.3, node rank 2, lost ("))
      << st.missing[0];
  EXPECT_EQ(st.missing[1], "node node2 at 10.0.0.2, node rank 1, not back yet");  // connected
  try {
    fa2.get();
    ADD_FAILURE() << "the round formed without node3";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing: node node3 at 10.0.0.3, node rank 2, lost ("),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RendezvousTest, SilentNodeIsRemovedAfterItsHeartbeatLimit) {
  auto a = client("a"), b = client("b");
  auto rb = request("node2", 2, 2);
  rb.keepAliveMs = 300;
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
  b->join(rb, 10s);
  fa.get();
  // node2's connection stays open but it sends nothing (like a stopped
  // process): after ~300 ms the server declares it dead.
  const auto start = std::chrono::steady_clock::now();
  auto event = a->waitEvent(5s);
  ASSERT_TRUE(event);
  EXPECT_NE(event->message.find("node node2 was lost (no heartbeat for 300 ms)"), std::string::npos)
      << event->message;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

TEST_F(RendezvousTest, JobWideRestartBudget) {
  auto a = client("a"), b = client("b");
  auto joinBoth = [&] {
    auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
    const Assignment rb = b->join(request("node2", 2, 2), 10s);
    return std::make_pair(fa.get(), rb);
  };
  auto [a1, b1] = joinBoth();
  protocol::NodeReport report;
  report.rdzvId = "job";
  report.nodeId = "node2";
  report.round = b1.round;
  report.maxRestarts = 1;
  report.exitCode = 7;
  report.report = "rank 3 exited with code 7";
  auto first = b->reportFailure(report);
  EXPECT_TRUE(first.restartAllowed);
  EXPECT_EQ(first.restarts, 1);
  auto event = a->waitEvent(5s);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, EventType::kRoundEnded);
  // A second report for the same round spends nothing.
  EXPECT_EQ(a->reportFailure({"job", "node1", a1.round, 1, 3, "late"}).restarts, 1);
  auto [a2, b2] = joinBoth();
  EXPECT_EQ(a2.restarts, 1);
  report.round = b2.round;
  auto second = b->reportFailure(report);
  EXPECT_FALSE(second.restartAllowed);
  event = a->waitEvent(5s);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, EventType::kJobFailed);
  EXPECT_EQ(event->exitCode, 7);
  EXPECT_EQ(event->message, "rank 3 exited with code 7");
  try {
    client("late")->join(request("node9", 2, 2), 2s);
    FAIL();
  } catch (const RendezvousClosedError& e) {
    EXPECT_EQ(e.exitCode(), 7);
    EXPECT_EQ(e.report(), "rank 3 exited with code 7");
  }
}

// A crash loop (give_up, version 7) fails the job at once, with the
// reporter's code, whatever budget is left.
TEST_F(RendezvousTest, AGiveUpReportFailsTheJobWithRestartsLeft) {
  auto a = client("a"), b = client("b");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
  const Assignment rb = b->join(request("node2", 2, 2), 10s);
  fa.get();
  protocol::NodeReport report{"job", "node2", rb.round, 1, 93, "no progress in 4 attempts"};
  report.giveUp = true;
  const auto decision = b->reportFailure(report);
  EXPECT_FALSE(decision.restartAllowed);
  EXPECT_EQ(decision.restarts, 0);  // the budget of 1 was not spent
  auto event = a->waitEvent(5s);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, EventType::kJobFailed);
  EXPECT_EQ(event->exitCode, 93);
  EXPECT_EQ(event->message, "no progress in 4 attempts");
}

// A connection acts only for the node it joined as, and the budget is the
// one the job was created with: neither a stranger's report for a real node,
// a report for a node that does not exist, nor a report asking for more
// restarts can end (or prolong) the job.
TEST_F(RendezvousTest, OnlyTheJoinedNodeReportsAndTheBudgetIsFixed) {
  auto a = client("a"), b = client("b"), stranger = client("stranger");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
  const Assignment rb = b->join(request("node2", 2, 2), 10s);
  fa.get();
  protocol::NodeReport forged{"job", "node1", rb.round, 1000, 9, "forged"};
  EXPECT_THROW(stranger->reportFailure(forged), Error);
  forged.nodeId = "node-that-does-not-exist";
  EXPECT_THROW(stranger->reportFailure(forged), Error);
  EXPECT_THROW(b->reportFailure(forged), Error);  // b joined as node2 only
  EXPECT_THROW(stranger->leave({"job", "node1", rb.round, 0, 0, ""}), Error);
  EXPECT_FALSE(a->waitEvent(300ms)) << "the round must still run";
  // A node asking for another budget cannot join.
  auto greedy = request("node3", 2, 2);
  greedy.maxRestarts = 1000;
  EXPECT_THROW(client("c")->join(greedy, 2s), Error);
  // node2's own report spends the job's budget of 1, whatever it asks for.
  protocol::NodeReport real{"job", "node2", rb.round, 1000, 7, "rank 3 failed"};
  EXPECT_EQ(b->reportFailure(real).restarts, 1);
  auto fa2 = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
  const Assignment rb2 = b->join(request("node2", 2, 2), 10s);
  fa2.get();
  real.round = rb2.round;
  EXPECT_FALSE(b->reportFailure(real).restartAllowed);
}

TEST_F(RendezvousTest, LeavingDoesNotEndTheRound) {
  auto a = client("a"), b = client("b");
  auto fa = std::async(std::launch::async, [&] { return a->join(request("node1", 2, 2), 10s); });
  b->join(request("node2", 2, 2), 10s);
  fa.get();
  b->leave({"job", "node2", 1, 0, 0, ""});
  b.reset();
  EXPECT_FALSE(a->waitEvent(300ms));
}

TEST_F(RendezvousTest, ThousandNodesJoinOneRound) {
  constexpr int kNodes = 1000;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < kNodes; ++i) clients.push_back(client("n" + std::to_string(i)));
  std::vector<std::future<Assignment>> results;
  for (int i = 0; i < kNodes; ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      auto r = request("node" + std::to_string(i), kNodes, kNodes, 8);
      return clients[i]->join(r, 60s);
    }));
  }
  std::set<std::uint32_t> ranks;
  for (auto& f : results) {
    const Assignment a = f.get();
    ranks.insert(a.groupRank);
    EXPECT_EQ(a.worldSize, 8u * kNodes);
    EXPECT_EQ(a.rankOffset, 8 * a.groupRank);
  }
  EXPECT_EQ(ranks.size(), static_cast<std::size_t>(kNodes));
}

}  // namespace
}  // namespace ddprun::rendezvous
