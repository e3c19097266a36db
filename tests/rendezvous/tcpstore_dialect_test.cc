// PyTorch TCPStore dialects on the store's port, byte for byte
// (reference: tcpstore-wire-protocol.md). The ops of 2.8-2.14 (queues,
// BARRIER) and the CANCEL_WAIT race are pinned here byte for byte; real
// 1.13 and current clients run in tcpstore_python_test.py. Every op test
// runs twice: against the store, and through a node relay in front of it
// (the agent's, ddprun/agent/relay): the same bytes must come back.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "ddprun/rendezvous/node_relay.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "ddprun/rendezvous/store_client.h"
#include "ddprun/rendezvous/store_server.h"
#include "raw_socket.h"
#include "wait_until.h"

namespace ddprun::rendezvous {
namespace {

using namespace std::chrono_literals;
using harness::RawSocket;

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string u32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
const std::string kValidate("\x00\xCE\xF7\x85\x3C", 5);

class TcpStoreDialectTest : public ::testing::Test {
 protected:
  void SetUp() override { start(false); }
  void start(bool strict) {
    StoreServerOptions options;
    options.token = "t";
    options.strict = strict;
    options.trustedAddresses = {"127.0.0.1"};  // TCPStore clients from here are served
    options.handshakeTimeout = 200ms;
    startWith(options);
  }
  virtual void startWith(const StoreServerOptions& options) {
    server_.reset();
    server_ = std::make_unique<StoreServer>(options);
    server_->start();
  }
  // Waits until the server holds `n` pending waits (WAIT or BARRIER).
  bool waitForServerWaiters(std::size_t n) {
    return harness::waitUntil([&] { return server_->stats().waiters == n; });
  }
  std::unique_ptr<StoreServer> server_;
};

// The op tests: against the store (false) and through a relay (true).
class TcpStoreOpsTest : public TcpStoreDialectTest, public ::testing::WithParamInterface<bool> {
 protected:
  bool throughRelay() const { return GetParam(); }
  void TearDown() override { relay_.reset(); }
  void startWith(const StoreServerOptions& options) override {
    relay_.reset();
    TcpStoreDialectTest::startWith(options);
    if (!throughRelay()) return;
    rendezvous::RelayOptions relay;
    relay.upstreamHost = "127.0.0.1";
    relay.upstreamPort = server_->port();
    relay.token = options.token;
    relay.limits = options.limits;
    relay_ = std::make_unique<rendezvous::RelayThread>(relay, nullptr);
  }
  std::uint16_t port() const { return relay_ ? relay_->port() : server_->port(); }
  // Waits until `n` clients wait (WAIT or BARRIER) on the path: on the
  // store, or in the relay (where callers of one key share a wait).
  bool waitForWaiters(std::size_t n) {
    if (!throughRelay()) return waitForServerWaiters(n);
    return harness::waitUntil([&] { return relay_->counters().waiting == n; });
  }
  std::unique_ptr<rendezvous::RelayThread> relay_;
};

INSTANTIATE_TEST_SUITE_P(DirectAndRelayed, TcpStoreOpsTest, ::testing::Bool(),
                         [](const auto& path) { return path.param ? "ThroughRelay" : "Direct"; });

TEST_P(TcpStoreOpsTest, V2HandshakeAndPingEcho) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x0D" + u32(0x12345678));  // VALIDATE (no reply), PING nonce
  EXPECT_EQ(s.readExactly(4, 2s), u32(0x12345678));
}

TEST_P(TcpStoreOpsTest, V2SetGetAddAndListKeys) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate);
  s.send("\x01" + str("/k") + str("v"));  // SET: no reply
  s.send("\x03" + str("/k"));             // GET
  EXPECT_EQ(s.readExactly(9, 2s), str("v"));
  s.send("\x04" + str("/n") + u64(5));  // ADD
  EXPECT_EQ(s.readExactly(8, 2s), u64(5));
  s.send("\x05" + u64(2) + str("/k") + str("/x"));  // CHECK: not ready
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x01", 1));
  s.send("\x11");  // LIST_KEYS
  const std::string keys = s.readExactly(8 + 10 + 10, 2s);
  EXPECT_EQ(keys.substr(0, 8), u64(2));
}

TEST_P(TcpStoreOpsTest, CancelWaitWithNothingPendingAnswersCanceled) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x0C");
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x01", 1));
}

TEST_P(TcpStoreOpsTest, CancelWaitDropsThePendingWait) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x06" + u64(1) + str("/late"));  // WAIT
  EXPECT_EQ(s.readExactly(1, 200ms), "");              // nothing yet
  s.send("\x0C");                                      // timed out: CANCEL_WAIT
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x01", 1));
  RawSocket other("127.0.0.1", port());
  other.send(kValidate + "\x01" + str("/late") + str("1"));
  EXPECT_EQ(s.readExactly(1, 300ms), "");  // the cancelled wait stays silent
  EXPECT_TRUE(waitForServerWaiters(0));
}

TEST_P(TcpStoreOpsTest, CancelWaitRaceSendsStopWaitingThenCanceled) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x06" + u64(1) + str("/race"));
  RawSocket other("127.0.0.1", port());
  other.send(kValidate + "\x01" + str("/race") + str("1"));  // completes the wait...
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x00", 1));   // ...STOP_WAITING in flight
  s.send("\x0C");  // the client timed out meanwhile and cancels
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x01", 1));
}

// Queues (2.8+): QUEUE_PUSH has no reply; QUEUE_POP never waits and answers
// the length before the pop (8 zero bytes when empty), then the value;
// a client's blocking pop is a WAIT first, answered by the next push.
TEST_P(TcpStoreOpsTest, QueuePushPopAndLenOnTheWire) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x0F" + str("/q"));  // QUEUE_POP, empty
  EXPECT_EQ(s.readExactly(8, 2s), u64(0));
  s.send("\x0E" + str("/q") + str("1") + "\x0E" + str("/q") + str("22"));  // two pushes
  s.send("\x10" + str("/q"));                                              // QUEUE_LEN
  EXPECT_EQ(s.readExactly(8, 2s), u64(2));
  s.send("\x0F" + str("/q"));
  EXPECT_EQ(s.readExactly(8 + 9, 2s), u64(2) + str("1"));
  s.send("\x05" + u64(1) + str("/q"));  // CHECK: a non-empty queue is ready
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x00", 1));
  s.send("\x0F" + str("/q"));
  EXPECT_EQ(s.readExactly(8 + 10, 2s), u64(1) + str("22"));
  s.send("\x05" + u64(1) + str("/q") + "\x07");  // CHECK, GETNUMKEYS: no key made
  EXPECT_EQ(s.readExactly(1 + 8, 2s), std::string("\x01", 1) + u64(0));
}

TEST_P(TcpStoreOpsTest, APushWakesOneBlockedPopper) {
  RawSocket a("127.0.0.1", port());
  RawSocket b("127.0.0.1", port());
  a.send(kValidate + "\x06" + u64(1) + str("/q"));  // WAIT, as queue_pop(block=True)
  ASSERT_TRUE(waitForWaiters(1));                   // a waits before b does
  b.send(kValidate + "\x06" + u64(1) + str("/q"));
  ASSERT_TRUE(waitForWaiters(2));
  RawSocket pusher("127.0.0.1", port());
  pusher.send(kValidate + "\x0E" + str("/q") + str("v"));
  EXPECT_EQ(a.readExactly(1, 2s), std::string("\x00", 1));  // the oldest waiter only
  EXPECT_TRUE(waitForWaiters(1));                           // b still waits
  a.send("\x0F" + str("/q"));
  EXPECT_EQ(a.readExactly(8 + 9, 2s), u64(1) + str("v"));
  pusher.send("\x0E" + str("/q") + str("w"));
  EXPECT_EQ(b.readExactly(1, 2s), std::string("\x00", 1));
}

// BARRIER (2.11+): key and world size; one 00 to each arrival once the
// last has come; a client that times out sends CANCEL_WAIT and gets 01.
TEST_P(TcpStoreOpsTest, BarrierRepliesWhenTheWorldHasArrived) {
  RawSocket a("127.0.0.1", port());
  RawSocket b("127.0.0.1", port());
  a.send(kValidate + "\x12" + str("/b") + u64(2));
  ASSERT_TRUE(waitForWaiters(1));  // a waits for the second arrival
  b.send(kValidate + "\x12" + str("/b") + u64(2));
  EXPECT_EQ(b.readExactly(1, 2s), std::string("\x00", 1));
  EXPECT_EQ(a.readExactly(1, 2s), std::string("\x00", 1));
  b.send("\x03" + str("/b"));  // the count is a key, as in PyTorch
  EXPECT_EQ(b.readExactly(9, 2s), str("2"));
}

TEST_P(TcpStoreOpsTest, ACancelledBarrierLeavesTheConnectionUsable) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x12" + str("/never") + u64(2));
  ASSERT_TRUE(waitForWaiters(1));
  s.send("\x0C");  // the client's timeout
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x01", 1));
  EXPECT_TRUE(waitForServerWaiters(0));
  s.send("\x0D" + u32(7));
  EXPECT_EQ(s.readExactly(4, 2s), u32(7));
}

TEST_P(TcpStoreOpsTest, AnOpcodePast2_14IsClosedWithItsNumber) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x13");
  bool closed = false;
  s.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
}

TEST_P(TcpStoreOpsTest, V1AddInitMatchesTheCapturedBytes) {
  // Appendix A: a 1.13.1 client's first request and the 1.13.1 server's reply.
  RawSocket s("127.0.0.1", port());
  s.send(std::string("\x03\x05\x00\x00\x00\x00\x00\x00\x00", 9) + "init/" + u64(1));
  EXPECT_EQ(s.readExactly(8, 2s), u64(1));
  // 1.13 numbering: SET 0, WAIT 5, GET 2, DELETE_KEY 8, GETNUMKEYS 6.
  s.send(std::string("\x00", 1) + str("/k1") + str("v1") + "\x05" + u64(1) + str("/k1"));
  EXPECT_EQ(s.readExactly(1, 2s), std::string("\x00", 1));
  s.send("\x02" + str("/k1"));
  EXPECT_EQ(s.readExactly(10, 2s), str("v1"));
  s.send("\x06");
  EXPECT_EQ(s.readExactly(8, 2s), u64(2));
  s.send("\x08" + str("/k1"));
  EXPECT_EQ(s.readExactly(8, 2s), u64(1));
}

// A PyTorch 1.13 client's callback socket never speaks, and closing it
// makes the client spin: it stays open from an address the server trusts
// (configured, or one an authenticated client connects from) and on an
// open store; from anyone else silence is a slowloris and is closed.
TEST_F(TcpStoreDialectTest, SilentConnectionsStayOpenOnlyFromTrustedAddresses) {
  const auto restart = [this](std::string token, std::vector<std::string> trusted) {
    server_.reset();
    StoreServerOptions options;
    options.token = std::move(token);
    options.trustedAddresses = std::move(trusted);
    options.handshakeTimeout = 200ms;
    server_ = std::make_unique<StoreServer>(options);
    server_->start();
  };
  bool closed = false;
  restart("t", {});
  {
    // Nobody has joined from 127.0.0.1 yet: silence is a slowloris, and a
    // TCPStore request is refused.
    RawSocket untrusted("127.0.0.1", server_->port());
    untrusted.readUntilClosed(600ms, closed);  // three times the handshake timeout
    EXPECT_TRUE(closed);
    RawSocket request("127.0.0.1", server_->port());
    request.send(kValidate + "\x0D" + u32(1));
    EXPECT_EQ(request.readUntilClosed(2s, closed), "");
    EXPECT_TRUE(closed);
  }
  {
    // An agent joins a rendezvous from 127.0.0.1: its address is a member.
    StoreClientOptions options;
    options.port = server_->port();
    options.token = "t";
    RendezvousClient agent(options);
    protocol::JoinRequest join;
    join.rdzvId = "job";
    join.nodeId = "node";
    agent.join(join, 2s);
    RawSocket callback("127.0.0.1", server_->port());
    callback.readUntilClosed(600ms, closed);
    EXPECT_FALSE(closed);
    RawSocket request("127.0.0.1", server_->port());
    request.send(kValidate + "\x0D" + u32(1));
    EXPECT_EQ(request.readExactly(4, 2s), u32(1));
  }
  for (const bool open : {false, true}) {
    restart(open ? "" : "t",
            open ? std::vector<std::string>{} : std::vector<std::string>{"127.0.0.1"});
    RawSocket callback("127.0.0.1", server_->port());
    callback.readUntilClosed(600ms, closed);
    EXPECT_FALSE(closed) << (open ? "open store" : "trusted address");
  }
}

// Bytes that never make a request are not a callback socket: a partial
// TCPStore request must complete within the handshake timeout, trusted or
// not.
TEST_F(TcpStoreDialectTest, APartialFirstRequestIsClosedAtTheHandshakeDeadline) {
  RawSocket slow("127.0.0.1", server_->port());
  slow.send(kValidate.substr(0, 3));
  bool closed = false;
  slow.readUntilClosed(600ms, closed);
  EXPECT_TRUE(closed);
}

TEST_F(TcpStoreDialectTest, StrictServerRefusesTcpStoreClients) {
  start(true);
  RawSocket s("127.0.0.1", server_->port());
  s.send(kValidate + "\x0D" + u32(7));
  bool closed = false;
  EXPECT_EQ(s.readUntilClosed(2s, closed), "");
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_->stats().rejected, 1u);
}

TEST_P(TcpStoreOpsTest, NativeAndTcpStoreClientsShareKeys) {
  RawSocket s("127.0.0.1", port());
  s.send(kValidate + "\x01" + str("/shared") + str("from-torch"));
  StoreClientOptions options;
  options.port = server_->port();
  options.token = "t";
  StoreClient native(options);
  EXPECT_EQ(native.get("/shared", 2s), "from-torch");
}

TEST_P(TcpStoreOpsTest, OversizedOrUnknownRequestsCloseOnlyThatConnection) {
  RawSocket big("127.0.0.1", port());
  big.send(kValidate + "\x01" + u64(1ULL << 40));
  bool closed = false;
  big.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  RawSocket unknown("127.0.0.1", port());
  unknown.send(kValidate + "\x63");
  unknown.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  RawSocket fine("127.0.0.1", port());
  fine.send(kValidate + "\x0D" + u32(1));
  EXPECT_EQ(fine.readExactly(4, 2s), u32(1));
}

// A write the store refuses is never dropped silently: the protocol has no
// error reply, so the connection closes and the client's next call fails.
TEST_P(TcpStoreOpsTest, ARefusedWriteClosesTheConnection) {
  StoreServerOptions options;
  options.token = "t";
  options.trustedAddresses = {"127.0.0.1"};
  options.maxTotalBytes = 4096;  // smaller than the largest value: "full" comes first
  options.limits.maxValueBytes = 8192;
  startWith(options);
  RawSocket full("127.0.0.1", port());
  full.send(kValidate + "\x01" + str("/big") + str(std::string(5000, 'x')));
  bool closed = false;
  full.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  RawSocket append("127.0.0.1", port());
  append.send(kValidate + "\x09" + str("/log") + str(std::string(1000, 'x')));  // APPEND
  append.send("\x09" + str("/log") + str(std::string(7500, 'x')));  // past maxValueBytes
  append.readUntilClosed(2s, closed);
  EXPECT_TRUE(closed);
  StoreClientOptions client;
  client.port = server_->port();
  client.token = "t";
  StoreClient native(client);
  EXPECT_FALSE(native.check({"/big"}));
  EXPECT_EQ(native.get("/log", 2s).size(), 1000u);
}

}  // namespace
}  // namespace ddprun::rendezvous
