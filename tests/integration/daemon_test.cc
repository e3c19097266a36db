// ddprun-rendezvous as a user runs it: a separate process on loopback.
#include <sys/resource.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "daemon_process.h"
#include "ddprun/common/error.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_client.h"
#include "raw_socket.h"
#include "wait_until.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::RawSocket;
using rendezvous::StoreClient;
using rendezvous::StoreClientOptions;

using harness::Daemon;
using harness::kDaemon;
using harness::kToken;

TEST(Daemon, PrintsItsAddressFirstAndServes) {
  Daemon daemon;
  StoreClient client(daemon.clientOptions());
  client.set("k", "v");
  EXPECT_EQ(client.get("k", 1s), "v");
}

TEST(Daemon, SixtyFourConcurrentClients) {
  Daemon daemon;
  constexpr int kClients = 64;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        StoreClient client(daemon.clientOptions("client-" + std::to_string(i)));
        for (int op = 0; op < 50; ++op) {
          const std::string key = fmt::format("c{}/k{}", i, op);
          client.set(key, key);
          if (client.get(key, 5s) != key) failures++;
          client.add("total", 1);
        }
        rendezvous::barrier(client, "all-done", kClients, 30s);
        // Every client sees every other client's last write.
        const std::string other = fmt::format("c{}/k49", (i + 1) % kClients);
        if (client.get(other, 5s) != other) failures++;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  StoreClient client(daemon.clientOptions());
  EXPECT_EQ(client.add("total", 0), kClients * 50);
}

TEST(Daemon, ClientVanishingMidWaitLeavesTheServerHealthy) {
  Daemon daemon;
  for (int i = 0; i < 20; ++i) {
    RawSocket raw("127.0.0.1", daemon.port());
    ASSERT_TRUE(raw.handshake(kToken));
    std::string bytes;
    rendezvous::protocol::encodeRequest(
        bytes, 7,
        rendezvous::protocol::Wait{.timeoutMs = rendezvous::protocol::kNoTimeout,
                                   .keys = {"never"}});
    raw.send(bytes);
  }  // each socket closes with its wait pending
  StoreClient client(daemon.clientOptions());
  client.set("never", "now");  // wakes nobody, crashes nothing
  EXPECT_EQ(client.get("never", 1s), "now");
  EXPECT_FALSE(daemon.process().wait(0ms).has_value()) << "the daemon exited";
}

// Established TCP connections to `port` on loopback (/proc/net/tcp: both
// ends of each are listed, the server's with the port as its local one).
int establishedTo(std::uint16_t port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  int count = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const auto colon = local.rfind(':');
    if (state == "01" && colon != std::string::npos &&
        std::stoul(local.substr(colon + 1), nullptr, 16) == port) {
      ++count;
    }
  }
  return count;
}

// Nodes "a", "b", ... of `daemon`, joined to rendezvous "job" as `join`
// says (node ids and addresses filled in); each got round 1 (else empty).
std::vector<std::unique_ptr<rendezvous::RendezvousClient>> joinedNodes(
    Daemon& daemon, int count, rendezvous::protocol::JoinRequest join) {
  std::vector<std::unique_ptr<rendezvous::RendezvousClient>> nodes;
  for (int i = 0; i < count; ++i) {
    nodes.push_back(std::make_unique<rendezvous::RendezvousClient>(
        daemon.clientOptions(std::string(1, static_cast<char>('a' + i)))));
  }
  join.rdzvId = "job";
  std::vector<std::future<rendezvous::protocol::Assignment>> joined;
  for (int i = 0; i < count; ++i) {
    joined.push_back(std::async(std::launch::async, [&, i] {
      auto request = join;
      request.nodeId = std::string(1, static_cast<char>('a' + i));
      request.address = "127.0.0." + std::to_string(i + 1);
      return nodes[i]->join(request, 10s);
    }));
  }
  bool allInRoundOne = true;
  for (auto& f : joined) allInRoundOne = f.get().round == 1 && allInRoundOne;
  if (!allInRoundOne) nodes.clear();
  return nodes;
}

// The daemon frozen (SIGSTOP, a VM pause) while two nodes of a Slurm step's
// three vanish with unread events (their sockets reset). On waking it
// learns of one loss, fails the job, and pushes the failure to the others:
// the push to the second lost node fails and closes that connection while
// the failure is being pushed. The daemon survives and serves.
TEST(Daemon, NodesLostWhileItWasFrozenDoNotCrashIt) {
  Daemon daemon;
  rendezvous::protocol::JoinRequest join;
  join.minNodes = join.maxNodes = join.fixedNodes = 3;
  join.maxRestarts = 3;
  auto nodes = joinedNodes(daemon, 3, join);
  ASSERT_EQ(nodes.size(), 3u);
  // a's workers fail: b and c are pushed the round's end, and leave it unread.
  rendezvous::protocol::NodeReport failure;
  failure.rdzvId = "job";
  failure.nodeId = "a";
  failure.round = 1;
  failure.exitCode = 3;
  ASSERT_TRUE(nodes[0]->reportFailure(failure).restartAllowed);
  daemon.process().signal(SIGSTOP);
  const int before = establishedTo(daemon.port());
  nodes[1].reset();  // unread data: the kernel resets the connection
  nodes[2].reset();
  ASSERT_TRUE(harness::waitUntil([&] { return establishedTo(daemon.port()) <= before - 2; }));
  daemon.process().signal(SIGCONT);
  // a hears that the job failed: two of its three fixed nodes are gone.
  std::optional<rendezvous::protocol::Event> event;
  try {
    do {
      event = nodes[0]->waitEvent(10s);
    } while (event && event->type != rendezvous::protocol::EventType::kJobFailed);
  } catch (const std::exception& e) {
    const auto ended = daemon.process().wait(5s);
    FAIL() << e.what() << "; the daemon ended with " << ended.value_or(-1) << ":\n"
           << daemon.process().stderrText();
  }
  ASSERT_TRUE(event.has_value());
  EXPECT_NE(event->message.find("lost"), std::string::npos) << event->message;
  nodes[0].reset();
  // Served after all that: a new client's write and read.
  try {
    StoreClient client(daemon.clientOptions());
    client.set("k", "v");
    EXPECT_EQ(client.get("k", 1s), "v");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  const auto ended = daemon.process().wait(0ms);
  EXPECT_FALSE(ended.has_value()) << "the daemon ended with " << ended.value_or(0) << ":\n"
                                  << daemon.process().stderrText();
}

// The daemon frozen (SIGSTOP) for twice the nodes' keep-alive bound while
// they heartbeat on: waking, it holds against them none of the heartbeats
// it could not read, says it was paused, and the round goes on.
TEST(Daemon, APausedDaemonDoesNotDropNodesForHeartbeatsItDidNotRead) {
  Daemon daemon;
  rendezvous::protocol::JoinRequest join;
  join.minNodes = join.maxNodes = 2;
  join.keepAliveMs = 1000;
  auto nodes = joinedNodes(daemon, 2, join);
  ASSERT_EQ(nodes.size(), 2u);
  daemon.process().signal(SIGSTOP);
  std::this_thread::sleep_for(2s);  // the fault: a pause past the bound
  daemon.process().signal(SIGCONT);
  // Heartbeats from the wake on, past the bound: each is answered.
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < until) {
    for (auto& node : nodes) {
      ASSERT_NO_THROW(node->keepAlive(std::chrono::steady_clock::now() + 5s))
          << daemon.process().stderrText();
    }
    std::this_thread::sleep_for(200ms);
  }
  const auto status = nodes[0]->status("job", true);
  EXPECT_TRUE(status.running);
  EXPECT_EQ(status.round, 1);
  EXPECT_EQ(status.members.size(), 2u);
  daemon.process().signal(SIGTERM);
  ASSERT_EQ(daemon.process().wait(10s), 0);
  const std::string log = daemon.process().stderrText();
  EXPECT_NE(log.find("did not run for 2."), std::string::npos) << log;
  EXPECT_EQ(log.find("no heartbeat"), std::string::npos) << log;
}

TEST(Daemon, ThousandConnectionFlood) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  ASSERT_GE(limit.rlim_cur, 2400u) << "the test needs 2400 descriptors";

  Daemon daemon;
  constexpr int kConnections = 1100;
  std::vector<std::unique_ptr<RawSocket>> flood;
  // Half authenticate and hold their connection, half never say anything.
  for (int i = 0; i < kConnections; ++i) {
    flood.push_back(std::make_unique<RawSocket>("127.0.0.1", daemon.port()));
    if (i % 2 == 0) {
      ASSERT_TRUE(flood.back()->handshake(kToken)) << "connection " << i;
    }
  }
  // A normal client is still served while all of them are open.
  StoreClient client(daemon.clientOptions());
  for (int i = 0; i < 100; ++i) client.add("served", 1);
  EXPECT_EQ(client.add("served", 0), 100);
  // Real clients on top of the flood also work.
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 100; ++i) {
    clients.push_back(std::make_unique<StoreClient>(daemon.clientOptions()));
    clients.back()->ping();
  }
  flood.clear();
  clients.clear();
  EXPECT_EQ(client.add("served", 1), 101);
  EXPECT_FALSE(daemon.process().wait(0ms).has_value()) << "the daemon exited";
}

TEST(Daemon, SigtermShutsDownCleanly) {
  Daemon daemon;
  StoreClient client(daemon.clientOptions());
  auto blocked = std::async(std::launch::async, [&] { client.wait({"never"}, 60s); });
  std::this_thread::sleep_for(100ms);
  daemon.process().signal(SIGTERM);
  EXPECT_EQ(daemon.process().wait(10s), 0);
  EXPECT_THROW(blocked.get(), NetworkError);
  const std::string log = daemon.process().stderrText();
  EXPECT_NE(log.find("received SIGTERM"), std::string::npos) << log;
  EXPECT_NE(log.find("has stopped"), std::string::npos) << log;
}

TEST(Daemon, SigintShutsDownCleanly) {
  Daemon daemon;
  daemon.process().signal(SIGINT);
  EXPECT_EQ(daemon.process().wait(10s), 0);
}

TEST(Daemon, WrongTokenIsRefusedAndLogged) {
  Daemon daemon;
  auto options = daemon.clientOptions();
  options.token = "not-the-token";
  EXPECT_THROW(StoreClient{options}, AuthError);
  StoreClient good(daemon.clientOptions());
  good.ping();
  daemon.process().signal(SIGTERM);
  ASSERT_EQ(daemon.process().wait(10s), 0);
  const std::string log = daemon.process().stderrText();
  EXPECT_NE(log.find("Rejected client 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("token is wrong"), std::string::npos) << log;
  // The token itself never appears in the log.
  EXPECT_EQ(log.find(kToken), std::string::npos) << log;
  EXPECT_EQ(log.find("not-the-token"), std::string::npos) << log;
}

TEST(Daemon, TokenFromFile) {
  const std::string path = ::testing::TempDir() + "/daemon-token";
  std::ofstream(path) << kToken << "\n";
  Daemon daemon({"--token-file", path}, {{"DDPRUN_TOKEN", ""}});
  StoreClient client(daemon.clientOptions());
  client.ping();
}

// Bad invocations: one clear line, a non-zero exit, nothing left running.
TEST(Daemon, BadInvocationsFailClearly) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    int code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--port", "0"}, {{"DDPRUN_TOKEN", ""}}, 2, "no token"},
      {{"--port", "70000"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--port"},
      {{"--port", "abc"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--port"},
      {{"--host", "not-an-ip", "--port", "0"}, {{"DDPRUN_TOKEN", kToken}}, 2, "not an IP address"},
      {{"--token-file", "/nonexistent"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--token-file"},
      {{"--bogus"}, {{"DDPRUN_TOKEN", kToken}}, 2, "bogus"},
      // Every number has a range: no duration overflows, no limit is zero.
      {{"--idle-timeout", "1e10"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--idle-timeout"},
      {{"--handshake-timeout", "0"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--handshake-timeout"},
      {{"--max-wait", "0"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--max-wait"},
      {{"--max-value-bytes", "5000000000"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--max-value-bytes"},
      {{"--max-buffered-bytes", "10"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--max-buffered-bytes"},
      {{"--max-connections", "0"}, {{"DDPRUN_TOKEN", kToken}}, 2, "--max-connections"},
      {{"--trusted-address", "somehost"}, {{"DDPRUN_TOKEN", kToken}}, 2, "not an IP address"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {kDaemon};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    ChildProcess process(argv, c.env);
    EXPECT_EQ(process.wait(10s), c.code) << c.message;
    const std::string err = process.stderrText();
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
  }
}

TEST(Daemon, PortInUseFailsClearly) {
  Daemon first;
  ChildProcess second({kDaemon, "--host", "127.0.0.1", "--port", std::to_string(first.port())},
                      {{"DDPRUN_TOKEN", kToken}});
  EXPECT_EQ(second.wait(10s), 1);
  EXPECT_NE(second.stderrText().find("choose another port"), std::string::npos);
}

}  // namespace
}  // namespace ddprun
