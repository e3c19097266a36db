// The store server and client together, in one process, over loopback.
#include "ddprun/rendezvous/store_server.h"
#include "ddprun/rendezvous/store_state.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "ddprun/common/error.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_client.h"
#include "raw_socket.h"

namespace ddprun::rendezvous {
namespace {

using namespace std::chrono_literals;
using ddprun::harness::RawSocket;

constexpr char kToken[] = "test-token";

class StoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override { startServer(StoreServerOptions{}); }

  void startServer(StoreServerOptions options) {
    server_.reset();
    options.token = kToken;
    server_ = std::make_unique<StoreServer>(options);
    server_->start();
  }

  StoreClientOptions clientOptions() const {
    StoreClientOptions options;
    options.port = server_->port();
    options.token = kToken;
    options.connectTimeout = 5s;
    options.requestTimeout = 5s;
    return options;
  }
  std::unique_ptr<StoreClient> client() { return std::make_unique<StoreClient>(clientOptions()); }

  // Waits (bounded) until the server's counters satisfy `predicate`.
  template <typename Predicate>
  bool eventually(Predicate predicate) {
    for (int i = 0; i < 500; ++i) {
      if (predicate(server_->stats())) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  std::unique_ptr<StoreServer> server_;
};

TEST_F(StoreServerTest, EveryOperation) {
  auto c = client();
  c->set("k", std::string("v\0x", 3));
  EXPECT_EQ(c->get("k", 1s), std::string("v\0x", 3));
  EXPECT_EQ(c->add("n", 2), 2);
  EXPECT_EQ(c->add("n", 3), 5);
  EXPECT_EQ(c->compareSet("k", std::string("v\0x", 3), "w"), "w");
  EXPECT_EQ(c->compareSet("k", "nope", "z"), "w");
  EXPECT_EQ(c->compareSet("missing", "x", "y"), "x");
  EXPECT_TRUE(c->check({"k", "n"}));
  EXPECT_FALSE(c->check({"k", "absent"}));
  c->wait({"k", "n"}, 1s);
  c->multiSet({{"a", "1"}, {"b", "2"}});
  EXPECT_EQ(c->multiGet({"b", "a"}, 1s), (std::vector<std::string>{"2", "1"}));
  c->append("log", "x");
  c->append("log", "y");
  EXPECT_EQ(c->get("log", 1s), "xy");
  EXPECT_EQ(c->numKeys(), 5);
  EXPECT_TRUE(c->deleteKey("log"));
  EXPECT_FALSE(c->deleteKey("log"));
  EXPECT_EQ(c->numKeys(), 4);
  c->ping();
}

// The server's end of the connection whose client end is `clientFd` (the
// server runs in this process): the socket whose peer is the client.
int serverEndOf(int clientFd) {
  sockaddr_in client{};
  socklen_t length = sizeof(client);
  if (::getsockname(clientFd, reinterpret_cast<sockaddr*>(&client), &length) != 0) return -1;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    sockaddr_in peer{};
    length = sizeof(peer);
    if (fd != clientFd && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0 &&
        peer.sin_family == AF_INET && peer.sin_port == client.sin_port &&
        peer.sin_addr.s_addr == client.sin_addr.s_addr) {
      return fd;
    }
  }
  return -1;
}

int intOption(int fd, int level, int name) {
  int value = -1;
  socklen_t length = sizeof(value);
  ::getsockopt(fd, level, name, &value, &length);
  return value;
}

TEST_F(StoreServerTest, EveryConnectionHasKeepAliveNoNagleAndCloseOnExec) {
  StoreServerOptions options;
  options.keepAliveIdle = 7s;
  options.keepAliveInterval = 2s;
  options.keepAliveCount = 4;
  startServer(options);
  RawSocket raw("127.0.0.1", server_->port());
  ASSERT_TRUE(raw.handshake(kToken));  // accepted and served
  const int fd = serverEndOf(raw.fd());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_NODELAY), 1);
  EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), 7);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), 2);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPCNT), 4);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 15000);  // 7 s + 4 x 2 s
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);                 // never inherited by a worker
}

TEST_F(StoreServerTest, GetBlocksUntilAnotherClientSets) {
  auto waiter = client();
  auto writer = client();
  auto result = std::async(std::launch::async, [&] { return waiter->get("late", 10s); });
  ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
  writer->set("late", "here");
  EXPECT_EQ(result.get(), "here");
}

TEST_F(StoreServerTest, WaitAndMultiGetAreWokenByEveryKindOfWrite) {
  auto waiter = client();
  auto writer = client();
  const std::vector<std::function<void(const std::string&)>> writes = {
      [&](const std::string& k) { writer->set(k, "1"); },
      [&](const std::string& k) { writer->add(k, 1); },
      [&](const std::string& k) { writer->append(k, "1"); },
      [&](const std::string& k) { writer->compareSet(k, "", "1"); },
      [&](const std::string& k) {
        writer->multiSet({{k, "1"}});
      },
  };
  for (std::size_t i = 0; i < writes.size(); ++i) {
    const std::string key = "woken/" + std::to_string(i);
    auto done = std::async(std::launch::async, [&] { return waiter->multiGet({key}, 10s); });
    ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
    writes[i](key);
    EXPECT_EQ(done.get().at(0), "1");
  }
}

TEST_F(StoreServerTest, WaitTimesOutOnTheServer) {
  auto c = client();
  const auto start = std::chrono::steady_clock::now();
  try {
    c->wait({"never"}, 200ms);
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_THROW(c->get("never", 0ms), TimeoutError);  // 0: look, don't wait
  // The connection is still good, and nothing is left waiting.
  c->set("after", "1");
  EXPECT_EQ(server_->stats().waiters, 0u);
}

TEST_F(StoreServerTest, OneConnectionCarriesAHeartbeatDuringAWait) {
  auto c = client();
  auto blocked = std::async(std::launch::async, [&] { c->wait({"release"}, 10s); });
  ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
  for (int i = 0; i < 20; ++i) c->ping();  // answered while the wait is pending
  c->set("release", "1");                  // same connection releases it
  blocked.get();
}

TEST_F(StoreServerTest, ManyThreadsShareOneClient) {
  auto c = client();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        c->set(key, key);
        EXPECT_EQ(c->get(key, 1s), key);
        c->add("total", 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->add("total", 0), 8 * 200);
}

TEST_F(StoreServerTest, WrongTokenIsRefusedBeforeAnyAccess) {
  auto options = clientOptions();
  options.token = "wrong";
  try {
    StoreClient bad(options);
    FAIL() << "connected with a wrong token";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
  }
  options.token = "";
  EXPECT_THROW(StoreClient{options}, AuthError);
  EXPECT_TRUE(eventually([](const StoreServerStats& s) { return s.rejected == 2; }));
}

TEST_F(StoreServerTest, RequestsBeforeTheHandshakeAreRefused) {
  // A SET sent straight after the preamble, without HELLO.
  RawSocket raw("127.0.0.1", server_->port());
  std::string bytes(protocol::kPreamble);
  protocol::encodeRequest(bytes, 1, protocol::Set{.key = "sneaky", .value = "1"});
  raw.send(bytes);
  bool closed = false;
  raw.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  EXPECT_FALSE(client()->check({"sneaky"}));
}

TEST_F(StoreServerTest, GarbageClosesOnlyThatConnection) {
  auto good = client();
  good->set("alive", "1");
  for (const std::string& garbage :
       {std::string("GET / HTTP/1.1\r\n\r\n"), std::string(64, '\xFF'), std::string("DDP\0", 4)}) {
    RawSocket raw("127.0.0.1", server_->port());
    raw.send(garbage);
    bool closed = false;
    raw.readUntilClosed(2s, closed);
    EXPECT_TRUE(closed || garbage.size() == 4);
  }
  EXPECT_EQ(good->get("alive", 1s), "1");
}

TEST_F(StoreServerTest, OversizedFrameClosesTheConnectionWithAnError) {
  RawSocket raw("127.0.0.1", server_->port());
  ASSERT_TRUE(raw.handshake(kToken));
  std::string header;
  protocol::appendHeader(header, 5, static_cast<std::uint8_t>(protocol::Op::kSet), 0xFFFFFFF0u);
  raw.send(header);  // claims 4 GiB; the server must not allocate it
  protocol::FrameHeader reply;
  std::string body;
  ASSERT_TRUE(raw.readFrame(reply, body, 2s));
  EXPECT_EQ(reply.requestId, 5u);
  EXPECT_EQ(reply.code, static_cast<std::uint8_t>(protocol::Status::kTooLarge));
  bool closed = false;
  raw.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(client()->add("still-serving", 1), 1);
}

TEST_F(StoreServerTest, OversizedKeyGetsAnErrorAndTheConnectionContinues) {
  StoreServerOptions options;
  options.limits.maxKeyBytes = 16;
  options.limits.maxValueBytes = 32;
  startServer(options);
  auto c = client();
  try {
    c->set(std::string(17, 'k'), "v");
    FAIL();
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find("key is over the limit of 16 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c->set("k", std::string(33, 'v')), ServerError);
  c->set("k", "fits");
  EXPECT_EQ(c->get("k", 1s), "fits");
}

// A peer of another release is told so at HELLO, before it sends a
// request this server would decode differently.
TEST_F(StoreServerTest, AnOlderProtocolVersionIsRefusedAtHello) {
  RawSocket raw("127.0.0.1", server_->port());
  std::string bytes(protocol::kPreamble);
  protocol::encodeRequest(bytes, 1,
                          protocol::Hello{.version = 1, .token = kToken, .clientName = "old"});
  raw.send(bytes);
  protocol::FrameHeader header;
  std::string body;
  ASSERT_TRUE(raw.readFrame(header, body, 5s));
  EXPECT_EQ(header.code, static_cast<std::uint8_t>(protocol::Status::kUnsupportedVersion));
  protocol::ErrorReply reply;
  ASSERT_TRUE(protocol::decodeError(header.code, body, reply));
  EXPECT_NE(reply.message.find("version 1"), std::string::npos) << reply.message;
}

TEST_F(StoreServerTest, ClientRefusesOversizedRequestsBeforeSending) {
  auto options = clientOptions();
  options.limits.maxKeyBytes = 8;
  StoreClient c(options);
  EXPECT_THROW(c.set(std::string(9, 'k'), "v"), ServerError);
  c.set("fits", "v");
  EXPECT_EQ(server_->stats().requests, 1u);  // the refused one never left
}

TEST_F(StoreServerTest, MultiGetWaitsAgainForAKeyDeletedMeanwhile) {
  auto waiter = client();
  auto writer = client();
  writer->set("a", "1");
  auto result = std::async(std::launch::async, [&] { return waiter->multiGet({"a", "b"}, 10s); });
  ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
  writer->deleteKey("a");
  writer->set("b", "2");  // "a" is gone: the wait must go on
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(result.wait_for(0ms), std::future_status::timeout);
  writer->set("a", "3");
  EXPECT_EQ(result.get(), (std::vector<std::string>{"3", "2"}));
}

TEST_F(StoreServerTest, ClientRefusesAnAbsurdReplyFrame) {
  // A fake server that answers the HELLO with a frame claiming 2 GiB.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  std::thread fake([&] {
    auto socket = acceptor.accept();
    char buffer[256];
    socket.read_some(boost::asio::buffer(buffer));
    const char reply[] =
        "\x01\x00\x00\x80\x01\x00\x00\x00\x00"
        "abc";
    boost::asio::write(socket, boost::asio::buffer(reply, sizeof(reply) - 1));
    boost::system::error_code ignored;
    socket.read_some(boost::asio::buffer(buffer), ignored);  // until the client closes
  });
  auto options = clientOptions();
  options.port = acceptor.local_endpoint().port();
  EXPECT_THROW(StoreClient{options}, ProtocolError);
  fake.join();
}

TEST_F(StoreServerTest, AddOnTextIsAServerError) {
  auto c = client();
  c->set("text", "abc");
  EXPECT_THROW(c->add("text", 1), ServerError);
  EXPECT_EQ(c->get("text", 1s), "abc");
}

TEST_F(StoreServerTest, StoreSizeLimitIsEnforced) {
  StoreServerOptions options;
  options.maxTotalBytes = 100 + 2 * kKeyOverheadBytes;  // the limit counts each key's overhead
  startServer(options);
  auto c = client();
  c->set("a", std::string(90, 'x'));
  EXPECT_THROW(c->set("b", std::string(20, 'x')), ServerError);
  EXPECT_FALSE(c->check({"b"}));
}

TEST_F(StoreServerTest, DisconnectMidWaitDropsTheWaiter) {
  {
    RawSocket raw("127.0.0.1", server_->port());
    ASSERT_TRUE(raw.handshake(kToken));
    std::string bytes;
    protocol::encodeRequest(bytes, 2,
                            protocol::Wait{.timeoutMs = protocol::kNoTimeout, .keys = {"never"}});
    raw.send(bytes);
    ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
  }  // the socket closes here
  EXPECT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 0; }));
  client()->set("never", "now");  // waking nobody is fine
}

TEST_F(StoreServerTest, SilentConnectionIsClosedAfterTheHandshakeTimeoutWhenStrict) {
  StoreServerOptions options;
  options.strict = true;
  options.handshakeTimeout = 200ms;
  startServer(options);
  RawSocket raw("127.0.0.1", server_->port());
  bool closed = false;
  raw.readUntilClosed(3s, closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_->stats().rejected, 1u);
}

TEST_F(StoreServerTest, IdleConnectionIsClosedAndTheClientReconnects) {
  StoreServerOptions options;
  options.idleTimeout = 300ms;
  startServer(options);
  auto c = client();
  c->set("k", "v");
  ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.active == 0; }));
  std::this_thread::sleep_for(1100ms);  // past the client's idle check
  EXPECT_EQ(c->get("k", 1s), "v");      // a new connection, transparently
  EXPECT_EQ(server_->stats().accepted, 2u);
}

TEST_F(StoreServerTest, ClientSeesServerStopAsNetworkError) {
  auto c = client();
  auto blocked = std::async(std::launch::async, [&] { c->wait({"never"}, 30s); });
  ASSERT_TRUE(eventually([](const StoreServerStats& s) { return s.waiters == 1; }));
  server_->stop();
  EXPECT_THROW(blocked.get(), NetworkError);
  EXPECT_THROW(c->set("k", "v"), NetworkError);
}

TEST_F(StoreServerTest, ConnectRetriesUntilTheServerAppears) {
  // Find a free port by binding and releasing it, then start late.
  std::uint16_t port = 0;
  {
    StoreServerOptions probe;
    probe.token = kToken;
    StoreServer temporary(probe);
    port = temporary.port();
  }
  auto options = clientOptions();
  options.port = port;
  auto connected = std::async(std::launch::async, [&] {
    StoreClient late(options);
    return late.add("late", 1);
  });
  std::this_thread::sleep_for(300ms);
  StoreServerOptions serverOptions;
  serverOptions.port = port;
  serverOptions.token = kToken;
  StoreServer server(serverOptions);
  server.start();
  EXPECT_EQ(connected.get(), 1);
}

TEST_F(StoreServerTest, ConnectGivesUpAtItsDeadline) {
  auto options = clientOptions();
  server_->stop();
  options.connectTimeout = 300ms;
  try {
    StoreClient nobody(options);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("could not connect"), std::string::npos) << e.what();
  }
}

TEST_F(StoreServerTest, PortInUseIsAClearError) {
  StoreServerOptions options;
  options.token = kToken;
  options.port = server_->port();
  try {
    StoreServer second(options);
    FAIL();
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("choose another port"), std::string::npos) << e.what();
  }
}

TEST_F(StoreServerTest, StrictStoreWithoutATokenIsAConfigError) {
  StoreServerOptions options;
  options.strict = true;
  EXPECT_THROW(StoreServer{options}, ConfigError);
}

TEST_F(StoreServerTest, WithoutATokenTheStoreIsOpen) {
  StoreServerOptions options;  // no token: every client is served
  StoreServer server(options);
  server.start();
  for (const std::string token : {"", "anything"}) {
    StoreClientOptions client;
    client.port = server.port();
    client.token = token;
    StoreClient store(client);
    store.set("k", "v" + token);
    EXPECT_EQ(store.get("k", std::chrono::seconds(5)), "v" + token);
  }
}

TEST_F(StoreServerTest, AClientWithoutATokenIsToldTheStoreNeedsOne) {
  StoreClientOptions client = clientOptions();
  client.token = "";
  try {
    StoreClient store(client);
    FAIL();
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("sent no token"), std::string::npos) << e.what();
  }
}

TEST_F(StoreServerTest, BarrierReleasesEveryRoundTogether) {
  constexpr int kParticipants = 6;
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kParticipants; ++i) {
    threads.emplace_back([&] {
      auto c = client();
      for (int round = 0; round < 3; ++round) {
        barrier(*c, "b", kParticipants, 10s);
        passed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed, 3 * kParticipants);
  auto c = client();
  EXPECT_THROW(barrier(*c, "lonely", 2, 100ms), TimeoutError);
}

TEST_F(StoreServerTest, PrefixStoreIsolatesKeySpaces) {
  auto c = client();
  PrefixStore a(*c, "attempt_0/");
  PrefixStore b(*c, "attempt_1/");
  a.set("rank", "old");
  EXPECT_FALSE(b.check({"rank"}));
  b.set("rank", "new");
  EXPECT_EQ(a.get("rank", 1s), "old");
  EXPECT_EQ(c->get("attempt_1/rank", 1s), "new");
  EXPECT_EQ(b.multiGet({"rank"}, 1s).at(0), "new");
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

using namespace std::chrono_literals;

// Workers hold a credential derived from the agents' token: key-value
// operations under their job's prefix only; never the control keys, other
// jobs' keys or the rendezvous.
TEST(WorkerCredentialOnTheServer, ReachesOnlyItsJobsKeys) {
  StoreServerOptions serverOptions;
  serverOptions.token = "agents-token";
  StoreServer server(serverOptions);
  server.start();
  StoreClientOptions options;
  options.port = server.port();
  options.token = "agents-token";
  StoreClient agent(options);
  agent.set("jobB/secret", "b");
  agent.set("__ddprun/rendezvous/jobA/finished", "0");
  options.token = workerCredential("agents-token", "jobA");
  StoreClient worker(options);
  worker.set("jobA/attempt_0/rank_0", "addr");
  EXPECT_EQ(worker.get("jobA/attempt_0/rank_0", 1s), "addr");
  EXPECT_EQ(worker.add("jobA/counter", 2), 2);
  EXPECT_THROW(worker.set("jobB/secret", "overwritten"), AuthError);
  EXPECT_THROW(worker.get("jobB/secret", 1s), AuthError);
  EXPECT_THROW(worker.deleteKey("jobB/secret"), AuthError);
  EXPECT_THROW(worker.set("jobA", "no slash: not under the prefix"), AuthError);
  EXPECT_THROW(worker.set("__ddprun/rendezvous/jobA/finished", "1"), AuthError);
  EXPECT_THROW(worker.multiSet({{"jobA/ok", "1"}, {"jobB/no", "1"}}), AuthError);
  EXPECT_FALSE(agent.check({"jobA/ok"}));  // all or nothing
  protocol::JoinRequest join;
  join.rdzvId = "jobA";
  join.nodeId = "fake-node";
  RendezvousClient workerAsAgent(options);  // the credential, on the rendezvous calls
  EXPECT_THROW(workerAsAgent.join(join, 1s), AuthError);
  protocol::NodeReport report{"jobA", "node", 1, 5, 9, "forged"};
  EXPECT_THROW(workerAsAgent.reportFailure(report), AuthError);
  EXPECT_EQ(agent.get("jobB/secret", 1s), "b");
  EXPECT_EQ(agent.get("__ddprun/rendezvous/jobA/finished", 1s), "0");
  // A credential for another store's token is refused at the handshake.
  options.token = workerCredential("another-token", "jobA");
  EXPECT_THROW(StoreClient{options}, AuthError);
}

}  // namespace
}  // namespace ddprun::rendezvous
