// NodeRendezvous against a real store on loopback: what a join's answer
// says (a round, the store's own timeout), the host's drain, and a store
// that goes away told as a loss with where it was. Every answer comes back
// on the test's loop, as on the agent's.
#include "ddprun/agent/rounds/node_rendezvous.h"

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_server.h"
#include "run_until.h"
#include "unused_port.h"

namespace ddprun::agent {
namespace {

using harness::runUntil;

using namespace std::chrono_literals;

// Node `nodeRank` of a static job of `nnodes` whose store is 127.0.0.1:`port`.
RoundsSettings staticNode(std::uint16_t port, int nodeRank, int nnodes,
                          std::chrono::milliseconds joinTimeout) {
  RoundsSettings c;
  c.runId = "job";
  c.hostname = "test";
  c.masterAddr = "127.0.0.1";
  c.masterPort = port;
  RendezvousConfig& r = c.rendezvous;
  r.mode = RendezvousMode::kStatic;
  r.endpointHost = "127.0.0.1";
  r.endpointPort = port;
  r.minNodes = r.maxNodes = nnodes;
  r.nodeRank = nodeRank;
  r.localAddr = "127.0.0.1";
  r.token = "t";
  r.joinTimeout = joinTimeout;
  r.keepAliveInterval = 1s;
  r.closeTimeout = 10s;
  r.progressInterval = 0ms;
  return c;
}

// A job of one node: its host forms round 1, the answer is the store's,
// and after it leaves the drain ends at once (nobody else is there).
TEST(NodeRendezvous, AJobOfOneNodeFormsARoundLeavesAndDrains) {
  boost::asio::io_context io;
  const RoundsSettings config = staticNode(harness::freePort(), 0, 1, 30s);
  NodeRendezvous node(io, config);
  EXPECT_TRUE(node.hosting());
  std::optional<JoinResult> joined;
  node.asyncJoin([&](JoinResult r) { joined = std::move(r); });
  ASSERT_TRUE(runUntil(io, [&] { return joined.has_value(); }));
  ASSERT_TRUE(joined->assignment.has_value()) << joined->error;
  EXPECT_TRUE(joined->answered);
  EXPECT_EQ(joined->assignment->round, 1);
  EXPECT_EQ(joined->assignment->worldSize, 1u);
  EXPECT_EQ(node.address(), "127.0.0.1");
  bool left = false;
  bool drained = false;
  node.asyncLeave(1, 0, [&] { left = true; });
  node.asyncWaitUntilAllLeft([&] { drained = true; });
  EXPECT_TRUE(runUntil(io, [&] { return left && drained; }));
}

// Nobody else comes: the store's own timeout is the answer (naming the
// missing node), told as answered, with the advice on what to check.
TEST(NodeRendezvous, TheStoresJoinTimeoutIsAnAnswerNamingTheMissingNode) {
  boost::asio::io_context io;
  const RoundsSettings config = staticNode(harness::freePort(), 0, 2, 300ms);
  NodeRendezvous node(io, config);
  std::optional<JoinResult> joined;
  node.asyncJoin([&](JoinResult r) { joined = std::move(r); });
  ASSERT_TRUE(runUntil(io, [&] { return joined.has_value(); }));
  EXPECT_FALSE(joined->assignment.has_value());
  EXPECT_TRUE(joined->answered);
  EXPECT_NE(joined->error.find("did not complete: 1 of 2 nodes joined; missing: node rank 1"),
            std::string::npos)
      << joined->error;
  EXPECT_NE(joined->error.find("check that every node runs with the same --rdzv_id"),
            std::string::npos)
      << joined->error;
}

// The store goes away while this node waits in a join: the loss is told
// once, with where the store was, and the join in flight ends without an
// answer (so the loss, not a timeout, is the node's exit).
TEST(NodeRendezvous, AStoreThatGoesAwayIsALossAndTheJoinHasNoAnswer) {
  rendezvous::StoreServerOptions options;
  options.token = "t";
  options.host = "127.0.0.1";
  auto server = std::make_unique<rendezvous::StoreServer>(options);
  server->start();
  boost::asio::io_context io;
  const RoundsSettings config = staticNode(server->port(), 1, 2, 60s);
  NodeRendezvous node(io, config);
  EXPECT_FALSE(node.hosting());
  std::vector<std::string> lost;
  node.start([](const rendezvous::protocol::Event&) {},
             [&](const std::string& what) { lost.push_back(what); });
  std::optional<JoinResult> joined;
  node.asyncJoin([&](JoinResult r) { joined = std::move(r); });
  // Waiting in the join: the store counts it.
  rendezvous::StoreClientOptions probeOptions;
  probeOptions.port = server->port();
  probeOptions.token = "t";
  rendezvous::RendezvousClient probe(probeOptions);
  ASSERT_TRUE(runUntil(io, [&] { return probe.status("job").joined == 1; }));
  const std::string where = node.where();
  server.reset();
  ASSERT_TRUE(runUntil(io, [&] { return joined.has_value() && !lost.empty(); }));
  EXPECT_FALSE(joined->assignment.has_value());
  EXPECT_FALSE(joined->answered) << joined->error;
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rfind("lost " + where + " (", 0), 0u) << lost[0];
}

}  // namespace
}  // namespace ddprun::agent
