// Clients that hold no token (or misuse one) against the real daemon, each
// attack with small budgets so that a failure to bound it would show: the
// daemon must stay up, stay within its memory budget (VmHWM), and keep
// answering a well-behaved client while the attack runs. Each test prints
// one row of the hostile-client table (docs/benchmarks.md): the attack, the
// daemon's peak RSS, and the well-behaved client's p99 and worst latency.
#include <sys/resource.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "daemon_process.h"
#include "ddprun/common/error.h"
#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "raw_socket.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::Daemon;
using harness::kToken;
using harness::RawSocket;
using rendezvous::StoreClient;
namespace protocol = rendezvous::protocol;

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string u32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
const std::string kValidate = std::string(1, '\0') + u32(0x3C85F7CE);

constexpr std::size_t kMiB = 1 << 20;

// The floods below hold a few thousand sockets in this process: raised to
// the hard limit once, and checked by the tests that need them.
std::size_t descriptorLimit() {
  static const std::size_t limit = [] {
    rlimit l{};
    ::getrlimit(RLIMIT_NOFILE, &l);
    l.rlim_cur = l.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &l);
    ::getrlimit(RLIMIT_NOFILE, &l);
    return static_cast<std::size_t>(l.rlim_cur);
  }();
  return limit;
}
// The daemon of every test: budgets small enough that an unbounded attack
// would pass them many times over.
// 127.0.0.1 is trusted, as if the attacker ran on a host where an agent of
// a job has joined: its TCPStore requests get past the door and must be
// bounded by the limits (from elsewhere they are refused at once).
const std::vector<std::string> kSmallBudgets = {"--max-buffered-bytes", std::to_string(32 * kMiB),
                                                "--max-store-bytes",    std::to_string(64 * kMiB),
                                                "--handshake-timeout",  "0.5",
                                                "--trusted-address",    "127.0.0.1"};
// Its peak RSS may not pass the budgets plus the daemon's own memory and
// allocator slack.
constexpr std::size_t kPeakRssLimit = 200 * kMiB;

// A well-behaved client pinging every 10 ms on its own thread.
class Probe {
 public:
  explicit Probe(const Daemon& daemon) : client_(daemon.clientOptions("probe")) {
    thread_ = std::thread([this] {
      while (!stop_) {
        const auto start = std::chrono::steady_clock::now();
        try {
          client_.ping();
          latencies_.push_back(std::chrono::steady_clock::now() - start);
          ++count_;
        } catch (const Error&) {
          ++failures_;
        }
        std::this_thread::sleep_for(10ms);
      }
    });
  }
  ~Probe() { finish(); }

  // Lets the probe take at least `n` samples (bounded), so that a short
  // attack is still observed by enough pings.
  void waitForSamples(std::size_t n) {
    for (int i = 0; i < 500 && count_ < n; ++i) std::this_thread::sleep_for(10ms);
  }
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::chrono::milliseconds percentile(double p) {
    finish();
    if (latencies_.empty()) return std::chrono::milliseconds::max();
    std::sort(latencies_.begin(), latencies_.end());
    const auto index = static_cast<std::size_t>(p * static_cast<double>(latencies_.size() - 1));
    return std::chrono::duration_cast<std::chrono::milliseconds>(latencies_[index]);
  }
  int failures() const { return failures_; }
  std::size_t samples() const { return latencies_.size(); }

 private:
  StoreClient client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<std::chrono::steady_clock::duration> latencies_;
  std::atomic<std::size_t> count_{0};
  std::atomic<int> failures_{0};
};

// Checks what every attack must leave behind and prints its table row.
void expectAbsorbed(Daemon& daemon, Probe& probe, const std::string& attack) {
  probe.waitForSamples(50);
  const auto p99 = probe.percentile(0.99);
  const auto worst = probe.percentile(1.0);
  const std::size_t peak = daemon.peakRssBytes();
  std::printf("| %s | %.1f MB | %lld ms | %lld ms |\n", attack.c_str(),
              static_cast<double>(peak) / 1e6, static_cast<long long>(p99.count()),
              static_cast<long long>(worst.count()));
  EXPECT_FALSE(daemon.process().wait(0ms).has_value()) << "the daemon exited";
  EXPECT_EQ(probe.failures(), 0);
  EXPECT_GT(probe.samples(), 0u);
  // Liveness, not speed: a stalled loop would show as seconds.
  EXPECT_LT(p99, 1000ms);
  EXPECT_LT(peak, kPeakRssLimit);
  // And a new client is served afterwards.
  StoreClient after(daemon.clientOptions("after"));
  after.set("after", "1");
  EXPECT_EQ(after.get("after", 2s), "1");
}

// Sends a native request on an authenticated raw connection and returns
// the status of its reply (kGoodbye if the connection closed instead).
protocol::Status nativeCall(RawSocket& socket, const protocol::Request& request,
                            std::uint32_t id = 7) {
  std::string bytes;
  protocol::encodeRequest(bytes, id, request);
  socket.send(bytes);
  protocol::FrameHeader header;
  std::string body;
  if (!socket.readFrame(header, body, 10s)) return protocol::Status::kGoodbye;
  return static_cast<protocol::Status>(header.code);
}

TEST(HostileClients, TcpStoreMultiGetOfOneLargeKeyRepeated) {
  Daemon daemon(kSmallBudgets);
  StoreClient owner(daemon.clientOptions());
  owner.set("big", std::string(kMiB, 'x'));
  Probe probe(daemon);
  // 600 names of a 1 MiB key in a 5.4 KB request: a 600 MiB reply if built.
  std::string request = "\x0A" + u64(600);
  for (int i = 0; i < 600; ++i) request += str("big");
  RawSocket attacker("127.0.0.1", daemon.port());
  attacker.send(kValidate + request);
  bool closed = false;
  const std::string got = attacker.readUntilClosed(5s, closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(got.size(), 64 * kMiB);
  expectAbsorbed(daemon, probe, "TCPStore MULTI_GET naming a 1 MiB key 600 times");
}

TEST(HostileClients, NativeMultiGetOfOneLargeKeyRepeatedIsAnError) {
  Daemon daemon(kSmallBudgets);
  StoreClient owner(daemon.clientOptions());
  owner.set("big", std::string(kMiB, 'x'));
  Probe probe(daemon);
  RawSocket attacker("127.0.0.1", daemon.port());
  ASSERT_TRUE(attacker.handshake(kToken));
  protocol::MultiGet get{.timeoutMs = 1000, .keys = {}};
  get.keys.assign(600, "big");
  EXPECT_EQ(nativeCall(attacker, get), protocol::Status::kTooLarge);
  // The connection goes on: a small request still works.
  EXPECT_EQ(nativeCall(attacker, protocol::Ping{"x"}, 8), protocol::Status::kOk);
  expectAbsorbed(daemon, probe, "native MULTI_GET naming a 1 MiB key 600 times");
}

TEST(HostileClients, PipelinedGetsThatAreNeverRead) {
  Daemon daemon(kSmallBudgets);
  StoreClient owner(daemon.clientOptions());
  owner.set("big", std::string(kMiB, 'x'));
  Probe probe(daemon);
  std::vector<std::unique_ptr<RawSocket>> attackers;
  for (int c = 0; c < 8; ++c) {
    attackers.push_back(std::make_unique<RawSocket>("127.0.0.1", daemon.port()));
    std::string gets = kValidate;
    for (int i = 0; i < 300; ++i) gets += "\x03" + str("big");  // 300 MiB of replies each
    attackers.back()->send(gets);
  }
  std::this_thread::sleep_for(2s);  // the attackers never read
  expectAbsorbed(daemon, probe, "8 connections pipelining 300 GETs of 1 MiB, never reading");
}

TEST(HostileClients, AnUnfinishedMultiSetIsBoundedAndParsedOnce) {
  Daemon daemon(kSmallBudgets);
  Probe probe(daemon);
  RawSocket attacker("127.0.0.1", daemon.port());
  std::string head = kValidate + "\x0B" + u64(1'000'000);
  attacker.send(head);
  bool closed = false;
  // 40 MB of small key/value pairs in 64 KiB writes, never the last one.
  std::string chunk;
  while (chunk.size() < 64 * 1024) chunk += str("k") + str("v");
  for (int i = 0; i < 640 && !closed; ++i) {
    if (!attacker.send(chunk)) closed = true;
  }
  attacker.readUntilClosed(5s, closed);
  EXPECT_TRUE(closed);  // over the 32 MiB budget (and the request limit)
  expectAbsorbed(daemon, probe, "an unfinished TCPStore MULTI_SET of 40 MB");
}

TEST(HostileClients, TcpStoreWaitOnAMillionKeys) {
  Daemon daemon(kSmallBudgets);
  Probe probe(daemon);
  RawSocket attacker("127.0.0.1", daemon.port());
  std::string wait = kValidate + "\x06" + u64(1'000'000);
  for (int i = 0; i < 1'000'000; ++i) wait += str(std::to_string(i));
  attacker.send(wait);
  bool closed = false;
  attacker.readUntilClosed(10s, closed);
  EXPECT_TRUE(closed);
  expectAbsorbed(daemon, probe, "TCPStore WAIT on 1,000,000 keys");
}

// Every wait ends: a TCPStore WAIT (which has no timeout of its own on the
// wire) is closed at --max-wait, a native one without a timeout times out.
TEST(HostileClients, WaitsOfEveryDialectEndAtTheLongestWait) {
  std::vector<std::string> args = kSmallBudgets;
  args.insert(args.end(), {"--max-wait", "1"});
  Daemon daemon(args);
  RawSocket tcp("127.0.0.1", daemon.port());
  tcp.send(kValidate + "\x06" + u64(1) + str("/never"));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  tcp.readUntilClosed(5s, closed);
  EXPECT_TRUE(closed);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  StoreClient native(daemon.clientOptions());
  EXPECT_THROW(native.wait({"never"}, std::chrono::milliseconds::max()), TimeoutError);
}

TEST(HostileClients, SilentAndHalfOpenConnectionsFromAStranger) {
  ASSERT_GE(descriptorLimit(), 2200u) << "the test needs 2200 descriptors (ulimit -n)";
  Daemon daemon({"--handshake-timeout", "0.5", "--max-connections-per-address", "1500"});
  Probe probe(daemon);
  // 127.0.0.2 has no authenticated client: its silence is not a callback
  // socket. 1000 silent, 500 with half a HELLO, and more than the per-address
  // cap allows.
  std::vector<std::unique_ptr<RawSocket>> stranger;
  for (int i = 0; i < 2000; ++i) {
    try {
      stranger.push_back(std::make_unique<RawSocket>("127.0.0.1", daemon.port(), "127.0.0.2"));
    } catch (const std::runtime_error&) {
      break;  // refused by the cap
    }
    if (i % 3 == 2) stranger.back()->send(std::string(protocol::kPreamble) + "\x20");
  }
  // Each closes at the handshake deadline (0.5 s): waited for, each in turn,
  // within a bound far above it.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int open = 0;
  for (auto& socket : stranger) {
    bool closed = false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    socket->readUntilClosed(std::max(left, std::chrono::milliseconds(1)), closed);
    if (!closed) ++open;
  }
  EXPECT_EQ(open, 0) << "connections still open after the handshake deadline";
  expectAbsorbed(daemon, probe, "2000 silent or half-open connections from a stranger");
}

// Out of descriptors (a hard limit of 64 here): silent strangers take
// them all, and the server sheds the oldest connection that has not proven
// itself, so a real client still gets in long before the handshake
// deadline would have freed anything.
TEST(HostileClients, OutOfDescriptorsTheOldestStrangerMakesRoom) {
  harness::ChildProcess daemon({"/usr/bin/prlimit", "--nofile=64:64", harness::kDaemon, "--host",
                                "127.0.0.1", "--port", "0"},
                               {{"DDPRUN_TOKEN", kToken}});
  const auto line = daemon.readStdoutLine(10s);
  ASSERT_TRUE(line) << daemon.stderrText();
  const auto port = static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  std::vector<std::unique_ptr<RawSocket>> strangers;
  for (int i = 0; i < 100; ++i) {
    strangers.push_back(std::make_unique<RawSocket>("127.0.0.1", port, "127.0.0.2"));
  }
  std::this_thread::sleep_for(300ms);
  rendezvous::StoreClientOptions options;
  options.port = port;
  options.token = kToken;
  options.connectTimeout = 3s;  // well under the 10 s handshake deadline
  const auto start = std::chrono::steady_clock::now();
  StoreClient client(options);
  client.set("in", "1");
  EXPECT_EQ(client.get("in", 1s), "1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0);
  EXPECT_NE(daemon.stderrText().find("out of file descriptors"), std::string::npos)
      << daemon.stderrText();
}

// The budget bounds what is buffered at once, not what was ever sent: a
// reply's share comes back once it is written, so clients that each read a
// large value in turn are all served.
TEST(HostileClients, WrittenRepliesGiveTheirBudgetBack) {
  Daemon daemon(kSmallBudgets);  // 32 MiB of buffers
  StoreClient owner(daemon.clientOptions());
  owner.set("large", std::string(20 * kMiB, 'x'));
  std::vector<std::unique_ptr<StoreClient>> readers;
  for (int i = 0; i < 4; ++i) {
    readers.push_back(std::make_unique<StoreClient>(daemon.clientOptions()));
    EXPECT_EQ(readers.back()->get("large", 5s).size(), 20 * kMiB) << "reader " << i;
  }
  EXPECT_EQ(readers.front()->get("large", 5s).size(), 20 * kMiB);
}

// The defences against floods must not hurt a burst of real clients: 2000
// connect at once (more than the 1024 unproven connections the server
// holds), each sending its HELLO straight away, and every one is served.
TEST(HostileClients, ABurstOfRealClientsIsNeverShed) {
  ASSERT_GE(descriptorLimit(), 2200u) << "the test needs 2200 descriptors (ulimit -n)";
  Daemon daemon;
  std::string hello(protocol::kPreamble);
  protocol::encodeRequest(hello, 1, protocol::Hello{.token = kToken, .clientName = "burst"});
  std::vector<std::unique_ptr<RawSocket>> clients;
  for (int i = 0; i < 2000; ++i) {
    clients.push_back(std::make_unique<RawSocket>("127.0.0.1", daemon.port()));
    clients.back()->send(hello);
  }
  int served = 0;
  for (auto& client : clients) {
    protocol::FrameHeader header;
    std::string body;
    if (client->readFrame(header, body, 10s) && header.code == 0) ++served;
  }
  EXPECT_EQ(served, 2000);
}

TEST(HostileClients, AppendCannotGrowPastTheLargestValue) {
  Daemon daemon({"--max-value-bytes", "4096"});
  StoreClient client(daemon.clientOptions());
  client.append("log", std::string(4000, 'a'));
  EXPECT_THROW(client.append("log", std::string(200, 'b')), ServerError);
  EXPECT_EQ(client.get("log", 1s).size(), 4000u);
}

TEST(HostileClients, ClientTextIsEscapedAndFloodsAreLoggedBriefly) {
  Daemon daemon({"--max-connections-per-address", "50"});
  {
    rendezvous::RendezvousClient agent(daemon.clientOptions());
    protocol::JoinRequest join;
    join.rdzvId = "job\n\x1b[31mFAKE LOG LINE";
    join.nodeId = "n";
    join.minNodes = join.maxNodes = 2;  // waits: nobody else joins
    EXPECT_THROW(agent.join(join, 200ms), TimeoutError);
  }
  // 2000 connections past the cap: each is refused, few lines are logged.
  std::vector<std::unique_ptr<RawSocket>> flood;
  for (int i = 0; i < 2000; ++i) {
    try {
      flood.push_back(std::make_unique<RawSocket>("127.0.0.1", daemon.port(), "127.0.0.3"));
    } catch (const std::runtime_error&) {
    }
  }
  std::this_thread::sleep_for(300ms);
  flood.clear();
  daemon.process().signal(SIGTERM);
  daemon.process().wait(10s);
  const std::string log = daemon.process().stderrText();
  EXPECT_EQ(log.find("\nFAKE"), std::string::npos);
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_NE(log.find("job\\x0a\\x1b[31mFAKE LOG LINE"), std::string::npos) << log;
  std::size_t refusals = 0;
  for (std::size_t at = log.find("Refused a connection"); at != std::string::npos;
       at = log.find("Refused a connection", at + 1)) {
    ++refusals;
  }
  EXPECT_GE(refusals, 1u);
  EXPECT_LE(refusals, 20u) << "a flood of refusals must not flood the log";
}

// The same store code runs inside every agent: attacked while a job runs,
// the job still finishes cleanly.
TEST(HostileClients, AnAgentsStoreUnderAttackStillFinishesItsJob) {
  harness::ChildProcess job(
      {std::string(DDPRUN_BIN_DIR) + "/ddprun", "--nproc_per_node=2", "--log_prefix=", "/bin/sh",
       "-c", "echo PORT $DDPRUN_STORE_PORT; sleep 3; echo DONE $RANK"},
      {{"DDPRUN_TOKEN", ""}});
  std::optional<std::string> line;
  while ((line = job.readStdoutLine(10s)) && line->rfind("PORT ", 0) != 0) {
  }
  ASSERT_TRUE(line) << job.stderrText();
  const auto port = static_cast<std::uint16_t>(std::stoi(line->substr(5)));
  std::vector<std::unique_ptr<RawSocket>> attackers;
  for (int i = 0; i < 200; ++i) {  // silent strangers
    attackers.push_back(std::make_unique<RawSocket>("127.0.0.1", port, "127.0.0.4"));
  }
  RawSocket flood("127.0.0.1", port);
  std::string request = kValidate + "\x0B" + u64(3);
  request += str("k") + str(std::string(kMiB, 'v'));  // then stops mid-request
  flood.send(request);
  RawSocket greedy("127.0.0.1", port);
  std::string get = kValidate + "\x0A" + u64(100000);
  for (int i = 0; i < 100000; ++i) get += str("k");
  greedy.send(get);
  const auto code = job.wait(60s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0) << job.stderrText();
  EXPECT_NE(job.stdoutText().find("DONE 1"), std::string::npos);
}

}  // namespace
}  // namespace ddprun
