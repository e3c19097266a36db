// The node relay (ddprun/agent/relay) in front of a real store: what it
// shares, what it must never share, and what it does when a worker or the
// store goes away. The byte-for-byte equality of every TCPStore op with
// and without the relay is tcpstore_dialect_test's (TcpStoreOpsTest).
#include "ddprun/rendezvous/node_relay.h"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "ddprun/agent/rounds/relayed_rounds.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_client.h"
#include "ddprun/rendezvous/store_server.h"
#include "raw_socket.h"
#include "wait_until.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using harness::RawSocket;
namespace protocol = rendezvous::protocol;

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
std::uint64_t asU64(const std::string& bytes) {
  std::uint64_t v = 0;
  std::memcpy(&v, bytes.data(), std::min<std::size_t>(8, bytes.size()));
  return v;
}
const std::string kValidate("\x00\xCE\xF7\x85\x3C", 5);
// PyTorch 2.2+'s opcodes.
const std::string kSet("\x01", 1), kGet("\x03", 1), kAdd("\x04", 1), kWait("\x06", 1);

using harness::waitUntil;
// The relay lives beside the store; the rounds that run it are the agent's.
using rendezvous::NodeRelay;
using rendezvous::RelayCounters;
using rendezvous::RelayOptions;
using rendezvous::RelayThread;

// Starts a relay and returns what it says when it loses (or never gets)
// the store; "" if that does not happen within the wait.
std::string whyTheStoreIsLost(const RelayOptions& options) {
  std::atomic<bool> lost{false};
  std::string why;
  RelayThread thread(options, [&](const std::string& reason) {
    why = reason;
    lost = true;
  });
  if (!waitUntil([&] { return lost.load(); })) return "";
  thread.stop();
  return why;
}

// A relay in front of `server`, with `token` for it.
RelayOptions relayTo(const rendezvous::StoreServer& server, const std::string& token) {
  RelayOptions options;
  options.upstreamHost = "127.0.0.1";
  options.upstreamPort = server.port();
  options.token = token;
  return options;
}

class NodeRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rendezvous::StoreServerOptions options;
    options.token = "agents-token";
    server_ = std::make_unique<rendezvous::StoreServer>(options);
    server_->start();
    relay_ = std::make_unique<RelayThread>(relayOptions(), [this](const std::string& reason) {
      lostBecause_ = reason;
      lost_ = true;
    });
  }
  RelayOptions relayOptions() const { return relayTo(*server_, "agents-token"); }
  std::unique_ptr<RawSocket> worker() {
    auto socket = std::make_unique<RawSocket>("127.0.0.1", relay_->port());
    socket->send(kValidate);
    return socket;
  }

  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<RelayThread> relay_;
  std::atomic<bool> lost_{false};
  std::string lostBecause_;
};

// The node's eight workers wait for the NCCL id: the store holds one wait.
TEST_F(NodeRelayTest, EightWorkersWaitingForOneKeyShareOneWaitOnTheStore) {
  std::vector<std::unique_ptr<RawSocket>> workers;
  for (int i = 0; i < 8; ++i) {
    workers.push_back(worker());
    workers.back()->send(kWait + u64(1) + str("/nccl_id"));
  }
  ASSERT_TRUE(waitUntil([&] { return relay_->counters().waiting == 8; }));
  ASSERT_TRUE(waitUntil([&] { return server_->stats().waiters == 1; }));
  auto rank0 = worker();
  rank0->send(kSet + str("/nccl_id") + str("id-bytes"));
  for (auto& w : workers) {
    EXPECT_EQ(w->readExactly(1, 5s), std::string("\x00", 1));
    w->send(kGet + str("/nccl_id"));
    EXPECT_EQ(w->readExactly(16, 5s), str("id-bytes"));
  }
  const RelayCounters counters = relay_->counters();
  EXPECT_GE(counters.coalesced, 7u);
  EXPECT_EQ(counters.waiting, 0u);
  EXPECT_EQ(server_->stats().waiters, 0u);
}

// Concurrent ADDs may go up as one; each caller still gets a sum of its
// own, as without the relay: together they are 1..N.
TEST_F(NodeRelayTest, ConcurrentAddsEachGetTheirOwnSum) {
  constexpr int kWorkers = 16;
  std::vector<std::unique_ptr<RawSocket>> workers;
  for (int i = 0; i < kWorkers; ++i) workers.push_back(worker());
  for (auto& w : workers) w->send(kAdd + str("/count") + u64(1));
  std::set<std::uint64_t> sums;
  for (auto& w : workers) sums.insert(asU64(w->readExactly(8, 5s)));
  std::set<std::uint64_t> expected;
  for (int i = 1; i <= kWorkers; ++i) expected.insert(static_cast<std::uint64_t>(i));
  EXPECT_EQ(sums, expected);
  workers[0]->send(kAdd + str("/count") + u64(0));
  EXPECT_EQ(asU64(workers[0]->readExactly(8, 5s)), static_cast<std::uint64_t>(kWorkers));
}

// The first ADD of a new key waits out the combining window: the ADDs the
// node's workers send within it go up as one (the window here is long
// enough that a loaded machine's four sends all fall in it).
TEST(NodeRelay, AddsWithinTheWindowGoUpAsOne) {
  rendezvous::StoreServerOptions options;
  options.token = "t";
  rendezvous::StoreServer server(options);
  server.start();
  RelayOptions relay = relayTo(server, "t");
  relay.addWindow = 3s;
  RelayThread thread(relay, nullptr);
  std::vector<std::unique_ptr<RawSocket>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(std::make_unique<RawSocket>("127.0.0.1", thread.port()));
    workers.back()->send(kValidate + kAdd + str("/init") + u64(1));
  }
  std::set<std::uint64_t> sums;
  for (auto& w : workers) sums.insert(asU64(w->readExactly(8, 30s)));
  EXPECT_EQ(sums, (std::set<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(thread.counters().addsCombined, 3u);
  // The key's next ADD does not wait: answered at once.
  workers[0]->send(kAdd + str("/init") + u64(1));
  EXPECT_EQ(asU64(workers[0]->readExactly(8, 2s)), 5u);
}

// A read is shared only with one that went up after the caller's own last
// write: a worker never reads a value older than its own write.
TEST_F(NodeRelayTest, AWorkerAlwaysReadsItsOwnWrite) {
  constexpr int kWorkers = 8;
  constexpr int kRounds = 150;
  std::vector<std::thread> threads;
  std::atomic<int> stale{0};
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto socket = worker();
      for (int i = 0; i < kRounds; ++i) {
        socket->send(kSet + str("/shared") + str(fmt::format("{}:{}", w, i)) + kGet +
                     str("/shared"));
        const std::uint64_t length = asU64(socket->readExactly(8, 5s));
        const std::string value = socket->readExactly(length, 5s);
        int writer = -1;
        int round = -1;
        std::sscanf(value.c_str(), "%d:%d", &writer, &round);
        if (writer == w && round != i) ++stale;  // its own earlier value
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(stale.load(), 0);
}

TEST_F(NodeRelayTest, AWorkerThatHangsUpDropsItsWaitOnTheStore) {
  auto waiting = worker();
  waiting->send(kWait + u64(1) + str("/never"));
  ASSERT_TRUE(waitUntil([&] { return server_->stats().waiters == 1; }));
  waiting->close();
  EXPECT_TRUE(waitUntil([&] { return server_->stats().waiters == 0; }));
  EXPECT_TRUE(waitUntil([&] { return relay_->counters().connectionsOpen == 0; }));
}

// The store lost: every worker's connection closes at once (their next
// call fails, as it would against the store), and the agent is told.
TEST_F(NodeRelayTest, TheStoreLostClosesEveryWorkerAndTellsTheAgent) {
  auto waiting = worker();
  waiting->send(kWait + u64(1) + str("/never"));
  ASSERT_TRUE(waitUntil([&] { return server_->stats().waiters == 1; }));
  server_.reset();
  bool closed = false;
  waiting->readUntilClosed(5s, closed);
  EXPECT_TRUE(closed);
  ASSERT_TRUE(waitUntil([&] { return lost_.load(); }));
  EXPECT_NE(lostBecause_.find("closed"), std::string::npos) << lostBecause_;
}

TEST_F(NodeRelayTest, AControlKeyClosesTheWorkersConnectionAsTheStoreDoes) {
  auto w = worker();
  w->send(kSet + str("__ddprun/rendezvous/x") + str("1"));
  bool closed = false;
  w->readUntilClosed(5s, closed);
  EXPECT_TRUE(closed);
  EXPECT_FALSE(lost_.load());
}

// One worker writing more than the store has acknowledged is not read
// until it catches up; its writes all arrive, and the other workers of the
// node are answered meanwhile.
TEST_F(NodeRelayTest, AFloodingWorkerDoesNotStarveTheOthers) {
  auto flooder = worker();
  const std::string value(1 << 20, 'x');
  std::string flood;
  for (int i = 0; i < 32; ++i) flood += kSet + str(fmt::format("/big{}", i)) + str(value);
  std::thread writer([&] { flooder->send(flood); });  // 32 MiB, 8x the relay's budget
  auto other = worker();
  for (int i = 0; i < 20; ++i) {
    other->send(kAdd + str("/other") + u64(1));
    EXPECT_EQ(asU64(other->readExactly(8, 10s)), static_cast<std::uint64_t>(i + 1));
  }
  writer.join();
  flooder->send(kAdd + str("/flooder-done") + u64(1));  // answered after its SETs
  EXPECT_EQ(asU64(flooder->readExactly(8, 30s)), 1u);
  for (int i = 0; i < 32; ++i) {
    other->send(kGet + str(fmt::format("/big{}", i)));
    EXPECT_EQ(asU64(other->readExactly(8, 10s)), value.size()) << i;
    EXPECT_EQ(other->readExactly(value.size(), 10s).size(), value.size());
  }
}

// A C++ worker of ddprun::worker speaks the native protocol with its worker
// credential: through the relay it gets what it gets from the store, the
// refusals' words included.
TEST_F(NodeRelayTest, ANativeWorkerGetsTheStoresAnswersThroughTheRelay) {
  const auto transcript = [&](std::uint16_t port) {
    rendezvous::StoreClientOptions options;
    options.port = port;
    options.token = workerCredential("agents-token", "job");
    rendezvous::StoreClient client(options);
    std::vector<std::string> lines;
    const auto attempt = [&](const std::function<std::string()>& op) {
      try {
        lines.push_back(op());
      } catch (const std::exception& e) {
        // The endpoint differs; the store's message after it must not.
        const std::string what = e.what();
        lines.push_back("error: " + what.substr(what.find(": ") + 2));
      }
    };
    attempt([&] {
      client.set("job/k", "v");
      return client.get("job/k", 1s);
    });
    attempt([&] { return std::to_string(client.add("job/n", 5)); });
    attempt([&] { return client.compareSet("job/k", "v", "w"); });
    attempt([&] { return client.check({"job/k", "job/missing"}) ? "all" : "not all"; });
    attempt([&] {
      client.wait({"job/missing"}, 100ms);
      return std::string("woken");
    });
    attempt([&] { return client.get("other/k", 1s); });
    attempt([&] {
      client.set("__ddprun/relay/x", "1");
      return std::string("set");
    });
    attempt([&] { return client.deleteKey("job/k") ? "deleted" : "absent"; });
    attempt([&] {
      return fmt::format("{}", fmt::join(client.valuesNow({"job/n", "job/k"}), ","));
    });
    client.deleteKey("job/n");  // the next transcript starts afresh
    return lines;
  };
  const auto direct = transcript(server_->port());
  const auto relayed = transcript(relay_->port());
  EXPECT_EQ(direct, relayed);
  EXPECT_EQ(direct.size(), 9u);
  EXPECT_NE(direct[4].find("WAIT timed out waiting for key 'job/missing'"), std::string::npos)
      << direct[4];
  EXPECT_NE(direct[5].find("outside this worker's job"), std::string::npos) << direct[5];
}

TEST_F(NodeRelayTest, ANativeWorkerThatHangsUpDropsItsWaitAndCannotJoin) {
  rendezvous::StoreClientOptions options;
  options.port = relay_->port();
  options.token = workerCredential("agents-token", "job");
  {
    rendezvous::RendezvousClient agent(options);
    protocol::JoinRequest join;
    join.rdzvId = "job";
    join.nodeId = "n";
    try {
      agent.join(join, 1s);
      FAIL() << "joined through the relay";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("key-value operations only"), std::string::npos)
          << e.what();
    }
  }
  std::thread waiter([&] {
    rendezvous::StoreClient client(options);
    try {
      client.wait({"job/never"}, 60s);
    } catch (const std::exception&) {
    }
  });
  ASSERT_TRUE(waitUntil([&] { return server_->stats().waiters == 1; }));
  relay_->stop();  // every worker connection closes: the waiter's call fails
  waiter.join();
  EXPECT_TRUE(waitUntil([&] { return server_->stats().waiters == 0; }));
}

// Workers that train for hours ask the store nothing: the store's idle
// limit says goodbye to the relay, which connects again; the workers'
// connections stay open and their next call works.
TEST(NodeRelay, AnIdleGoodbyeIsNotTheStoreLost) {
  rendezvous::StoreServerOptions options;
  options.token = "t";
  options.idleTimeout = 200ms;
  rendezvous::StoreServer server(options);
  server.start();
  RelayOptions relay = relayTo(server, "t");
  std::atomic<bool> lost{false};
  RelayThread thread(relay, [&](const std::string&) { lost = true; });
  RawSocket w("127.0.0.1", thread.port());
  w.send(kValidate + kAdd + str("/n") + u64(1));
  EXPECT_EQ(asU64(w.readExactly(8, 5s)), 1u);
  ASSERT_TRUE(waitUntil([&] { return server.stats().accepted >= 2; }));  // said goodbye, came back
  w.send(kAdd + str("/n") + u64(1));
  EXPECT_EQ(asU64(w.readExactly(8, 5s)), 2u);
  EXPECT_FALSE(lost.load());
}

// One round whose workers' store is at 127.0.0.1:`port`.
class OneRound : public RoundSource {
 public:
  OneRound(boost::asio::io_context& io, std::uint16_t port) : io_(io), port_(port) {}
  void join(std::function<void(JoinResult)> done) override {
    JoinResult result;
    result.assignment.emplace();
    result.assignment->round = 1;
    result.assignment->masterAddr = "127.0.0.1";
    result.assignment->masterPort = port_;
    boost::asio::post(io_, [done = std::move(done), result] { done(result); });
  }
  void reportFailure(const FailureNotice&, std::function<void(FailureAnswer)>) override {}
  void leave(std::int64_t, int, std::function<void()> done) override { done(); }
  bool hosting() const override { return false; }
  void waitUntilAllLeft(std::function<void()> done) override { done(); }
  WorkersStore workersStore(const protocol::Assignment& round) const override {
    return {round.masterAddr, static_cast<int>(round.masterPort), "job/round_1/"};
  }
  std::string restartMessage(std::int64_t, int) const override { return ""; }

 private:
  boost::asio::io_context& io_;
  std::uint16_t port_;
};

// The agent's side: each round's workers get the relay as MASTER_ADDR:PORT
// and DDPRUN_STORE_*, and the relay's loss reaches the agent's loop with
// the words the failure report shows.
TEST(RelayedRounds, TheWorkersGetTheRelayAndItsLossIsNamed) {
  rendezvous::StoreServerOptions options;
  options.token = "t";
  auto server = std::make_unique<rendezvous::StoreServer>(options);
  server->start();
  const std::uint16_t storePort = server->port();
  boost::asio::io_context io;
  RelayedRounds rounds(io, std::make_unique<OneRound>(io, storePort), "t");
  struct Facts : FactSink {
    boost::asio::io_context& io;
    std::string why;
    explicit Facts(boost::asio::io_context& loop) : io(loop) {}
    void tell(const FeatureFact& fact) override {
      if (const auto* lost = std::get_if<RelayLost>(&fact)) why = lost->why;
      io.stop();
    }
  } facts(io);
  auto work = boost::asio::make_work_guard(io);  // the loss comes from the relay's thread
  rounds.tellLossesTo(facts);
  rounds.join([&](JoinResult result) {
    ASSERT_TRUE(result.assignment.has_value()) << result.error;
    EXPECT_EQ(result.assignment->masterAddr, "127.0.0.1");
    EXPECT_NE(result.assignment->masterPort, storePort);  // the relay's
    const WorkersStore store = rounds.workersStore(*result.assignment);
    EXPECT_EQ(store.port, static_cast<int>(result.assignment->masterPort));
    EXPECT_EQ(store.prefix, "job/round_1/");
    RawSocket w("127.0.0.1", static_cast<std::uint16_t>(store.port));
    w.send(kValidate + kAdd + str("job/n") + u64(2));
    EXPECT_EQ(asU64(w.readExactly(8, 5s)), 2u);  // through the relay to the store
    server.reset();                              // the store is lost
  });
  io.run_for(30s);
  EXPECT_NE(facts.why.find(fmt::format("this node's relay lost the workers' store at 127.0.0.1:{}",
                                       storePort)),
            std::string::npos)
      << facts.why;
}

TEST(NodeRelay, AStoreThatRefusesTheTokenIsNamed) {
  rendezvous::StoreServerOptions options;
  options.token = "right";
  rendezvous::StoreServer server(options);
  server.start();
  RelayOptions relay = relayTo(server, "wrong");
  const std::string why = whyTheStoreIsLost(relay);
  EXPECT_NE(why.find("refused the relay"), std::string::npos) << why;
  EXPECT_NE(why.find("token is wrong"), std::string::npos) << why;
}

TEST(NodeRelay, AStoreNobodyServesIsNamedAfterTheConnectTimeout) {
  RelayOptions relay;
  relay.upstreamHost = "127.0.0.1";
  relay.upstreamPort = 1;  // nothing listens
  relay.connectTimeout = 300ms;
  const std::string why = whyTheStoreIsLost(relay);
  EXPECT_NE(why.find("cannot connect to the store at 127.0.0.1:1"), std::string::npos) << why;
}

TEST(NodeRelay, AnAddressItCannotListenOnIsAClearError) {
  RelayOptions relay;
  relay.listenHost = "not-an-address";
  try {
    RelayThread thread(relay, nullptr);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 'not-an-address'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddprun::agent
