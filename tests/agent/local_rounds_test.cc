// One node's rounds (agent/src/local_rounds.h) on a real attempt store:
// the restart budget and a fresh store for each attempt.
#include "ddprun/agent/rounds/local_rounds.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <optional>
#include <vector>

#include "ddprun/agent/rounds/attempt_store.h"

namespace ddprun::agent {
namespace {

namespace protocol = rendezvous::protocol;

// One node alone: each join is a fresh attempt on a fresh store (the
// workers' keys under attempt_<restarts>/), and the budget is --max_restarts.
TEST(LocalRounds, CountsTheBudgetAndGivesEachAttemptAFreshStore) {
  boost::asio::io_context io;
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  options.quiet = true;
  AttemptStore store(options);
  protocol::Assignment base;
  base.masterAddr = "127.0.0.1";
  LocalRounds rounds(io, store, base, true, 2, "job");
  std::vector<std::optional<protocol::RestartDecision>> decisions;
  std::vector<protocol::Assignment> joins;
  std::vector<WorkersStore> stores;
  auto join = [&] {
    rounds.join([&](JoinResult r) {
      joins.push_back(*r.assignment);
      stores.push_back(rounds.workersStore(*r.assignment));
    });
    io.run();
    io.restart();
  };
  auto fail = [&] {
    rounds.reportFailure(FailureNotice{},
                         [&](FailureAnswer a) { decisions.push_back(a.decision); });
    EXPECT_TRUE(decisions.empty() || decisions.size() < 4);  // not answered inside the call
    io.run();
    io.restart();
  };
  join();
  fail();
  join();
  fail();
  join();
  fail();
  ASSERT_EQ(joins.size(), 3u);
  EXPECT_EQ(joins[0].round, 1);
  EXPECT_EQ(joins[2].round, 3);
  EXPECT_EQ(joins[2].restarts, 2);
  EXPECT_NE(joins[0].masterPort, joins[1].masterPort);  // a new store
  EXPECT_EQ(stores[1].host, "127.0.0.1");
  EXPECT_EQ(stores[1].port, joins[1].masterPort);  // the workers' MASTER_PORT is that store
  EXPECT_EQ(stores[1].prefix, "job/attempt_1/");
  ASSERT_EQ(decisions.size(), 3u);
  EXPECT_TRUE(decisions[0]->restartAllowed);
  EXPECT_TRUE(decisions[1]->restartAllowed);
  EXPECT_EQ(decisions[1]->restarts, 2);
  EXPECT_FALSE(decisions[2]->restartAllowed);
}

}  // namespace
}  // namespace ddprun::agent
