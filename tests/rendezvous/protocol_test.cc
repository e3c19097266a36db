#include "ddprun/rendezvous/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace ddprun::rendezvous::protocol {
namespace {

// One valid request of every op, in op order.
std::vector<Request> everyRequest() {
  std::vector<Request> all;
  all.push_back(Hello{.version = kVersion, .token = "token", .clientName = "worker-3"});
  all.push_back(Set{.key = "k", .value = std::string("v\0alue", 6)});
  all.push_back(Get{.key = "k", .timeoutMs = 1234});
  all.push_back(Add{.key = "counter", .delta = -42});
  all.push_back(CompareSet{.key = "k", .expected = "old", .desired = "new"});
  all.push_back(Check{.keys = {"a", "b", ""}});
  all.push_back(Wait{.timeoutMs = kNoTimeout, .keys = {"a", "b"}});
  all.push_back(DeleteKey{.key = "k"});
  all.push_back(NumKeys{});
  all.push_back(MultiGet{.timeoutMs = 7, .keys = {"x", "y"}});
  all.push_back(MultiSet{.keys = {"x", "y"}, .values = {"1", "2"}});
  all.push_back(Append{.key = "log", .value = "line\n"});
  all.push_back(Ping{.payload = "nonce"});
  all.push_back(JoinRequest{.rdzvId = "job",
                            .nodeId = "node-a",
                            .nodeRank = 3,
                            .localWorldSize = 8,
                            .minNodes = 2,
                            .maxNodes = 4,
                            .lastCallMs = 30000,
                            .keepAliveMs = 15000,
                            .timeoutMs = 600000,
                            .address = "10.0.0.7",
                            .masterPort = 29511,
                            .maxRestarts = 5,
                            .maxNodeFailures = 3,
                            .nodeCooldownMs = 600000,
                            .fixedNodes = 4});
  const NodeReport node{"job", "node-a", 4, 3, 137, "rank 5 was killed by SIGKILL"};
  all.push_back(Leave{node});
  NodeReport givingUp = node;
  givingUp.giveUp = true;
  givingUp.lostAPeer = true;
  all.push_back(ReportFailure{givingUp});
  all.push_back(RendezvousStatusQuery{"job"});
  all.push_back(QueuePush{.key = "q", .value = "item"});
  all.push_back(QueuePop{.key = "q"});
  all.push_back(QueueLen{.key = "q"});
  all.push_back(ListKeys{});
  all.push_back(Barrier{.key = "b", .worldSize = 8, .timeoutMs = kNoTimeout});
  all.push_back(SharedWait{.timeoutMs = 100, .keys = {"a"}});
  all.push_back(Cancel{.requestId = 77});
  return all;
}

// Splits a framed message into header and body.
std::pair<FrameHeader, std::string_view> frameOf(const std::string& bytes) {
  FrameHeader header;
  EXPECT_EQ(parseFrameHeader(bytes, 1 << 30, header), ParseResult::kFrame);
  EXPECT_EQ(bytes.size(), kHeaderSize + header.bodySize);
  return {header, std::string_view(bytes).substr(kHeaderSize)};
}

TEST(Protocol, EveryRequestRoundTrips) {
  const auto all = everyRequest();
  ASSERT_EQ(all.size(), std::variant_size_v<Request>);
  for (const Request& request : all) {
    SCOPED_TRACE(opName(opOf(request)));
    std::string bytes;
    encodeRequest(bytes, 77, request);
    auto [header, body] = frameOf(bytes);
    EXPECT_EQ(header.requestId, 77u);
    EXPECT_EQ(header.code, static_cast<std::uint8_t>(opOf(request)));
    Request decoded;
    const auto error = decodeRequest(header.code, body, Limits{}, decoded);
    ASSERT_TRUE(error.ok()) << error.message;
    EXPECT_EQ(decoded, request);
    // What a client checks before sending is what the server accepts.
    EXPECT_TRUE(checkRequest(request, Limits{}).ok());
  }
}

TEST(Protocol, FrameHeaderIsLittleEndian) {
  std::string bytes;
  appendHeader(bytes, 0x01020304, 5, 0x0A0B0C0D);
  EXPECT_EQ(bytes, std::string("\x0D\x0C\x0B\x0A\x04\x03\x02\x01\x05", 9));
}

TEST(Protocol, EveryTruncationIsDetected) {
  for (const Request& request : everyRequest()) {
    std::string bytes;
    encodeRequest(bytes, 1, request);
    auto [header, body] = frameOf(bytes);
    // LEAVE's and REPORT_FAILURE's last bytes are version 7's give_up and
    // version 8's lost_a_peer: a body without them is an older client's
    // (AnOlderReportFailureDecodesWithoutTheLaterFlags).
    const bool trailingFlags = header.code == static_cast<std::uint8_t>(Op::kLeave) ||
                               header.code == static_cast<std::uint8_t>(Op::kReportFailure);
    for (std::size_t cut = 0; cut < body.size() - (trailingFlags ? 2 : 0); ++cut) {
      SCOPED_TRACE(std::string(opName(opOf(request))) + " cut at " + std::to_string(cut));
      // The frame parser waits for the missing bytes...
      FrameHeader partial;
      EXPECT_EQ(
          parseFrameHeader(std::string_view(bytes).substr(0, kHeaderSize + cut), 1 << 30, partial),
          ParseResult::kNeedMore);
      // ...and a body that is short by itself is refused, not over-read.
      Request decoded;
      const auto error = decodeRequest(header.code, body.substr(0, cut), Limits{}, decoded);
      EXPECT_EQ(error.status, Status::kBadRequest);
      EXPECT_NE(error.message.find("truncated"), std::string::npos) << error.message;
    }
  }
}

TEST(Protocol, AnOlderReportFailureDecodesWithoutTheLaterFlags) {
  NodeReport report{"job", "node-a", 4, 3, 1, "rank 5 exited with code 1"};
  report.giveUp = true;
  report.lostAPeer = true;
  std::string bytes;
  encodeRequest(bytes, 1, ReportFailure{report});
  auto [header, body] = frameOf(bytes);
  ASSERT_EQ(body.substr(body.size() - 2), std::string("\x01\x01"));
  Request decoded;
  // A version 7 agent's body ends before lost_a_peer...
  ASSERT_TRUE(decodeRequest(header.code, body.substr(0, body.size() - 1), Limits{}, decoded).ok());
  report.lostAPeer = false;
  EXPECT_EQ(decoded, Request(ReportFailure{report}));
  // ...and a version 6 agent's before give_up too.
  ASSERT_TRUE(decodeRequest(header.code, body.substr(0, body.size() - 2), Limits{}, decoded).ok());
  report.giveUp = false;
  EXPECT_EQ(decoded, Request(ReportFailure{report}));
}

TEST(Protocol, PartialHeaderNeedsMore) {
  FrameHeader header;
  for (std::size_t n = 0; n < kHeaderSize; ++n) {
    EXPECT_EQ(parseFrameHeader(std::string(n, '\0'), 100, header), ParseResult::kNeedMore);
  }
}

TEST(Protocol, TrailingBytesAreRefused) {
  std::string bytes;
  encodeRequest(bytes, 1, Set{.key = "k", .value = "v"});
  auto [header, body] = frameOf(bytes);
  std::string longer(body);
  longer += "xx";
  Request decoded;
  const auto error = decodeRequest(header.code, longer, Limits{}, decoded);
  EXPECT_EQ(error.status, Status::kBadRequest);
  EXPECT_NE(error.message.find("trailing"), std::string::npos);
}

TEST(Protocol, OversizedFrameIsReportedBeforeItArrives) {
  std::string bytes;
  appendHeader(bytes, 9, static_cast<std::uint8_t>(Op::kSet), 0xFFFFFFFFu);
  FrameHeader header;
  EXPECT_EQ(parseFrameHeader(bytes, Limits{}.maxFrameBytes, header), ParseResult::kTooLarge);
  EXPECT_EQ(header.requestId, 9u);
  EXPECT_EQ(header.bodySize, 0xFFFFFFFFu);
}

TEST(Protocol, OversizedKeyValueAndCountAreTooLarge) {
  Limits tiny;
  tiny.maxKeyBytes = 4;
  tiny.maxValueBytes = 8;
  tiny.maxKeysPerRequest = 2;
  struct Case {
    Request request;
    const char* what;
  };
  const Case cases[] = {
      {Set{.key = "12345", .value = "v"}, "key"},
      {Append{.key = "k", .value = "123456789"}, "value"},
      {Check{.keys = {"a", "b", "c"}}, "keys"},
      {MultiSet{.keys = {"k"}, .values = {"123456789"}}, "value"},
      {Ping{.payload = "123456789"}, "value"},
  };
  for (const Case& c : cases) {
    std::string bytes;
    encodeRequest(bytes, 1, c.request);
    auto [header, body] = frameOf(bytes);
    Request decoded;
    const auto error = decodeRequest(header.code, body, tiny, decoded);
    EXPECT_EQ(error.status, Status::kTooLarge) << c.what;
    EXPECT_NE(error.message.find(c.what), std::string::npos) << error.message;
    // The client's check before sending refuses the same requests.
    const auto checked = checkRequest(c.request, tiny);
    EXPECT_EQ(checked.status, Status::kTooLarge) << c.what;
    EXPECT_NE(checked.message.find(c.what), std::string::npos) << checked.message;
  }
}

TEST(Protocol, CheckRequestMeasuresTheWholeBody) {
  // SET "k" = 10 bytes: 4 + 1 + 4 + 10 = 19 body bytes.
  const Request set = Set{.key = "k", .value = std::string(10, 'v')};
  std::string bytes;
  encodeRequest(bytes, 1, set);
  ASSERT_EQ(bytes.size(), kHeaderSize + 19);
  Limits limits;
  limits.maxFrameBytes = 19;
  EXPECT_TRUE(checkRequest(set, limits).ok());
  limits.maxFrameBytes = 18;
  const auto error = checkRequest(set, limits);
  EXPECT_EQ(error.status, Status::kTooLarge);
  EXPECT_NE(error.message.find("frame limit"), std::string::npos) << error.message;
  // A MULTI_SET whose lists differ in length cannot be encoded.
  EXPECT_EQ(checkRequest(MultiSet{.keys = {"a", "b"}, .values = {"1"}}, Limits{}).status,
            Status::kBadRequest);
}

// The server's access check sees exactly the store keys a request names:
// not values, not the rendezvous ids, not the client's name.
TEST(Protocol, AllStoreKeysVisitsOnlyStoreKeys) {
  auto keysOf = [](const Request& request) {
    std::vector<std::string> seen;
    EXPECT_TRUE(allStoreKeys(request, [&](std::string_view key) {
      seen.emplace_back(key);
      return true;
    }));
    return seen;
  };
  using Keys = std::vector<std::string>;
  EXPECT_EQ(keysOf(Set{.key = "k", .value = "v"}), Keys{"k"});
  EXPECT_EQ(keysOf(CompareSet{.key = "k", .expected = "e", .desired = "d"}), Keys{"k"});
  EXPECT_EQ(keysOf(MultiSet{.keys = {"a", "b"}, .values = {"1", "2"}}), (Keys{"a", "b"}));
  EXPECT_EQ(keysOf(MultiGet{.timeoutMs = 1, .keys = {"x", "y"}}), (Keys{"x", "y"}));
  EXPECT_EQ(keysOf(Get{.key = "g"}), Keys{"g"});
  EXPECT_EQ(keysOf(Ping{.payload = "__ddprun/x"}), Keys{});
  EXPECT_EQ(keysOf(NumKeys{}), Keys{});
  EXPECT_EQ(keysOf(Hello{.token = "t", .clientName = "n"}), Keys{});
  const auto all = everyRequest();
  for (std::size_t i = 13; i < 17; ++i) {  // JOIN and the other rendezvous ops
    EXPECT_EQ(keysOf(all[i]), Keys{}) << opName(opOf(all[i]));
  }
  EXPECT_EQ(keysOf(QueuePush{.key = "q", .value = "__ddprun/v"}), Keys{"q"});
  EXPECT_EQ(keysOf(QueuePop{.key = "q"}), Keys{"q"});
  EXPECT_EQ(keysOf(QueueLen{.key = "q"}), Keys{"q"});
  EXPECT_EQ(keysOf(Barrier{.key = "b", .worldSize = 2}), Keys{"b"});
  EXPECT_EQ(keysOf(SharedWait{.keys = {"a", "b"}}), (Keys{"a", "b"}));
  EXPECT_EQ(keysOf(ListKeys{}), Keys{});
  EXPECT_EQ(keysOf(Cancel{.requestId = 3}), Keys{});
  EXPECT_EQ(keysOf(RendezvousStatusQuery{"job"}), Keys{});
  // The first refusal stops the walk.
  int asked = 0;
  EXPECT_FALSE(allStoreKeys(Check{.keys = {"a", "b", "c"}}, [&](std::string_view key) {
    ++asked;
    return key != "b";
  }));
  EXPECT_EQ(asked, 2);
}

TEST(Protocol, ClaimedLengthsNeverAllocateFirst) {
  // A key list that claims a billion keys in a 12-byte body is refused by
  // arithmetic, not by trying to reserve the memory.
  std::string body;
  body += std::string("\x00\x00\x00\x00", 4);  // timeout
  body += std::string("\x00\xCA\x9A\x3B", 4);  // 1e9 keys
  body += std::string("\x01\x00\x00\x00", 4);
  Limits generous;
  generous.maxKeysPerRequest = 2'000'000'000;
  Request decoded;
  auto error = decodeRequest(static_cast<std::uint8_t>(Op::kWait), body, generous, decoded);
  EXPECT_EQ(error.status, Status::kBadRequest);
  // A string that claims 4 GiB in a short body is a truncation.
  std::string set = std::string("\xFF\xFF\xFF\x7F", 4) + "abc";
  error = decodeRequest(static_cast<std::uint8_t>(Op::kSet), set, generous, decoded);
  EXPECT_NE(error.status, Status::kOk);
}

TEST(Protocol, UnknownOpsAreRefused) {
  Request decoded;
  for (int code : {0, 25, 100, 255}) {
    const auto error = decodeRequest(static_cast<std::uint8_t>(code), "", Limits{}, decoded);
    EXPECT_EQ(error.status, Status::kBadRequest);
    EXPECT_NE(error.message.find("unknown operation"), std::string::npos);
  }
}

TEST(Protocol, GarbageNeverCrashesTheDecoder) {
  std::mt19937 random(42);
  for (int i = 0; i < 20000; ++i) {
    std::string body(random() % 64, '\0');
    for (char& c : body) c = static_cast<char>(random());
    Request request;
    const auto code = static_cast<std::uint8_t>(random() % 26);
    const auto error = decodeRequest(code, body, Limits{}, request);
    if (!error.ok()) {
      EXPECT_FALSE(error.message.empty());
    }
    RendezvousStatus status;
    decodeReply(body, status);
    ValuesReply values;
    decodeReply(body, values);
    ErrorReply errorReply;
    decodeError(static_cast<std::uint8_t>(random() % 12), body, errorReply);
  }
}

// Any OK reply body, for tables of them.
using AnyReply =
    std::variant<EmptyReply, ValueReply, ValuesReply, IntegerReply, FlagReply, HelloReply,
                 Assignment, RestartDecision, RendezvousStatus, QueuePopReply>;

// The reply of every op, in op order, with fields that are not all zero.
std::vector<AnyReply> everyReply() {
  const ValueReply value{std::string("bytes\0", 6)};
  const IntegerReply integer{-9'000'000'000LL};
  const FlagReply flag{true};
  return {
      HelloReply{1, "server"},
      EmptyReply{},                   // SET
      value,                          // GET
      integer,                        // ADD
      value,                          // COMPARE_SET
      flag,                           // CHECK
      EmptyReply{},                   // WAIT
      flag,                           // DELETE_KEY
      integer,                        // NUM_KEYS
      ValuesReply{{"a", "", "ccc"}},  // MULTI_GET
      EmptyReply{},                   // MULTI_SET
      EmptyReply{},                   // APPEND
      value,                          // PING
      Assignment{3, 1, 2, 8, 16, 1, "10.0.0.1", 29500},
      EmptyReply{},              // LEAVE
      RestartDecision{2, true},  // REPORT_FAILURE
      RendezvousStatus{.exists = true,
                       .round = 4,
                       .running = false,
                       .joined = 3,
                       .minNodes = 2,
                       .maxNodes = 8,
                       .lastCallMs = 12345,
                       .missingCount = 20,
                       .missing = {"node rank 1", "node n7 (10.0.0.7)"},
                       .closed = true,
                       .restarts = 2,
                       .maxRestarts = 3,
                       .members = {{"n1", "10.0.0.1", 0, 8}, {"n2", "10.0.0.2", -1, 4}},
                       .lastFailure = {"n1", 4, 7, 1700000000000, "rank 3 failed"}},
      EmptyReply{},              // QUEUE_PUSH
      QueuePopReply{2, "item"},  // QUEUE_POP
      IntegerReply{1},           // QUEUE_LEN
      ValuesReply{{"a", "b"}},   // LIST_KEYS
      EmptyReply{},              // BARRIER
      FlagReply{false},          // SHARED_WAIT
      FlagReply{true},           // CANCEL
  };
}

TEST(Protocol, EveryReplyRoundTrips) {
  const auto requests = everyRequest();
  const auto replies = everyReply();
  ASSERT_EQ(replies.size(), requests.size());
  for (std::size_t i = 0; i < replies.size(); ++i) {
    SCOPED_TRACE(opName(opOf(requests[i])));
    // Each op's reply has the type its request names.
    std::visit(
        [&](const auto& request) {
          using Expected = typename std::decay_t<decltype(request)>::Reply;
          EXPECT_TRUE(std::holds_alternative<Expected>(replies[i]));
        },
        requests[i]);
    std::visit(
        [](const auto& reply) {
          std::string bytes;
          encodeReply(bytes, 5, reply);
          auto [header, body] = frameOf(bytes);
          EXPECT_EQ(header.code, static_cast<std::uint8_t>(Status::kOk));
          std::decay_t<decltype(reply)> decoded;
          ASSERT_TRUE(decodeReply(body, decoded));
          EXPECT_EQ(decoded, reply);
          // A reply cut short, or with bytes left over, is refused.
          if (!body.empty()) {
            EXPECT_FALSE(decodeReply(body.substr(0, body.size() - 1), decoded));
          }
          EXPECT_FALSE(decodeReply(std::string(body) + "x", decoded));
        },
        replies[i]);
  }
}

TEST(Protocol, AStatusReplyNamesAtMostSixteenMissingNodes) {
  RendezvousStatus status;
  status.missingCount = 40;
  status.missing.assign(kMaxMissingShown + 1, "node");
  std::string bytes;
  encodeReply(bytes, 1, status);
  auto [header, body] = frameOf(bytes);
  RendezvousStatus decoded;
  EXPECT_FALSE(decodeReply(body, decoded));
}

TEST(Protocol, ErrorRepliesCarryTheirMessage) {
  std::string bytes;
  encodeError(bytes, 3, Status::kTimeout, "WAIT timed out waiting for key 'x'");
  auto [header, body] = frameOf(bytes);
  ErrorReply reply;
  ASSERT_TRUE(decodeError(header.code, body, reply));
  EXPECT_EQ(reply.status, Status::kTimeout);
  EXPECT_EQ(reply.message, "WAIT timed out waiting for key 'x'");
  EXPECT_FALSE(decodeError(200, body, reply));  // no such status
  EXPECT_FALSE(decodeError(static_cast<std::uint8_t>(Status::kOk), body, reply));
}

// A closed rendezvous answers with the job's exit code and report as fields,
// not packed into the message text.
TEST(Protocol, ClosedRepliesCarryTheJobsOutcome) {
  std::string bytes;
  encodeClosed(bytes, 4, "the rendezvous is closed", {137, "exit_code=3\nrank 5 was killed"});
  auto [header, body] = frameOf(bytes);
  ErrorReply reply;
  ASSERT_TRUE(decodeError(header.code, body, reply));
  EXPECT_EQ(reply.status, Status::kClosed);
  EXPECT_EQ(reply.message, "the rendezvous is closed");
  EXPECT_EQ(reply.failure.exitCode, 137);
  EXPECT_EQ(reply.failure.report, "exit_code=3\nrank 5 was killed");  // text is just text
  EXPECT_FALSE(decodeError(header.code, body.substr(0, body.size() - 1), reply));
}

TEST(Protocol, EventsRoundTrip) {
  Event event{EventType::kJobFailed, "job", 7, 139, "rank 2 was killed by SIGSEGV"};
  std::string bytes;
  encodeEvent(bytes, event);
  auto [header, body] = frameOf(bytes);
  EXPECT_EQ(header.requestId, 0u);
  EXPECT_EQ(header.code, static_cast<std::uint8_t>(Status::kEvent));
  Event decoded;
  ASSERT_TRUE(decodeEvent(body, decoded));
  EXPECT_EQ(decoded.type, EventType::kJobFailed);
  EXPECT_EQ(decoded.rdzvId, "job");
  EXPECT_EQ(decoded.round, 7);
  EXPECT_EQ(decoded.exitCode, 139);
  EXPECT_EQ(decoded.message, event.message);
  EXPECT_FALSE(decodeEvent(body.substr(0, body.size() - 1), decoded));
  std::string bad(body);
  bad[0] = 9;  // unknown event type
  EXPECT_FALSE(decodeEvent(bad, decoded));
}

// The wire format is byte for byte what docs/protocol.md specifies and what
// released clients and servers speak: a digest (FNV-1a) of the encoding of
// every request and reply layout must not change unless the protocol does
// (then bump protocol::kVersion and the document).
TEST(Protocol, EncodingsAreByteForByteStable) {
  std::string all;
  for (const Request& request : everyRequest()) encodeRequest(all, 9, request);
  // Replies in the order the digest was first taken in (grouped by layout).
  const auto replies = everyReply();
  for (std::size_t i : {0, 2, 4, 12, 9, 3, 8, 5, 7, 1, 11, 6, 10, 14, 13, 15, 16}) {
    std::visit([&](const auto& r) { encodeReply(all, 9, r); }, replies.at(i));
  }
  encodeError(all, 3, Status::kTimeout, "WAIT timed out");
  encodeClosed(all, 4, "the rendezvous is closed", {137, "rank 5 was killed"});
  encodeEvent(all, {EventType::kRoundEnded, "job", 2, 0, "node n1 was lost"});
  encodeEvent(all, {EventType::kNodeExcluded, "job", 3, 0, "node n2 is excluded"});
  encodeError(all, 5, Status::kExcluded, "node n2 is excluded");
  std::uint64_t digest = 1469598103934665603ULL;
  for (const unsigned char c : all) {
    digest ^= c;
    digest *= 1099511628211ULL;
  }
  // Version 2 (0x1184d7bb24c2a208): version 1's bytes (0xdb7d26d408d00b03)
  // but HELLO's version field. Version 3: JOIN's max_node_failures and
  // node_cooldown_ms, REPORT_FAILURE's and LEAVE's failed_at_ms, the
  // kNodeExcluded/kNodeReadmitted events and the EXCLUDED status. Version 4
  // (0x50fc4f86d9e33d8e): RENDEZVOUS_STATUS's details. Version 5: JOIN's
  // fixed_nodes (0x7552664c67d1c743). Version 6: HELLO's version, and the
  // new ops QUEUE_PUSH, QUEUE_POP (and its reply), QUEUE_LEN, LIST_KEYS,
  // BARRIER, SHARED_WAIT and CANCEL, appended to the tables above.
  // Version 7 (0xf0706412c6720fc3): LEAVE's and REPORT_FAILURE's give_up.
  // Version 8: their lost_a_peer after it.
  EXPECT_EQ(digest, 0x04f8061905eebdd7ULL) << std::hex << digest;
}

TEST(Protocol, TimeoutConversionClamps) {
  using std::chrono::milliseconds;
  EXPECT_EQ(toTimeoutMs(milliseconds(-5)), 0u);
  EXPECT_EQ(toTimeoutMs(milliseconds(250)), 250u);
  EXPECT_EQ(toTimeoutMs(milliseconds(1LL << 40)), kNoTimeout);
}

}  // namespace
}  // namespace ddprun::rendezvous::protocol
