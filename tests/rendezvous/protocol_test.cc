#include "ddprun/rendezvous/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace ddprun::rendezvous::protocol {
namespace {

// One valid request of every op.
std::vector<Request> everyRequest() {
  auto make = [](Op op, std::vector<std::string> keys, std::vector<std::string> values) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    return r;
  };
  std::vector<Request> all;
  all.push_back(make(Op::kHello, {"worker-3"}, {"token"}));
  all.push_back(make(Op::kSet, {"k"}, {std::string("v\0alue", 6)}));
  all.push_back(make(Op::kGet, {"k"}, {}));
  all.back().timeoutMs = 1234;
  all.push_back(make(Op::kAdd, {"counter"}, {}));
  all.back().delta = -42;
  all.push_back(make(Op::kCompareSet, {"k"}, {"old", "new"}));
  all.push_back(make(Op::kCheck, {"a", "b", ""}, {}));
  all.push_back(make(Op::kWait, {"a", "b"}, {}));
  all.back().timeoutMs = kNoTimeout;
  all.push_back(make(Op::kDeleteKey, {"k"}, {}));
  all.push_back(make(Op::kNumKeys, {}, {}));
  all.push_back(make(Op::kMultiGet, {"x", "y"}, {}));
  all.back().timeoutMs = 7;
  all.push_back(make(Op::kMultiSet, {"x", "y"}, {"1", "2"}));
  all.push_back(make(Op::kAppend, {"log"}, {"line\n"}));
  all.push_back(make(Op::kPing, {}, {"nonce"}));
  Request join = make(Op::kJoin, {}, {});
  join.join = {"job", "node-a", 3, 8, 2, 4, 30000, 15000, "10.0.0.7", 29511};
  join.timeoutMs = 600000;
  all.push_back(join);
  for (Op op : {Op::kLeave, Op::kReportFailure}) {
    Request node = make(op, {}, {});
    node.node = {"job", "node-a", 4, 3, 137, "rank 5 was killed by SIGKILL"};
    all.push_back(node);
  }
  Request status = make(Op::kRendezvousStatus, {}, {});
  status.rdzvId = "job";
  all.push_back(status);
  return all;
}

void expectSame(const Request& a, const Request& b) {
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.join.rdzvId, b.join.rdzvId);
  EXPECT_EQ(a.join.nodeId, b.join.nodeId);
  EXPECT_EQ(a.join.nodeRank, b.join.nodeRank);
  EXPECT_EQ(a.join.localWorldSize, b.join.localWorldSize);
  EXPECT_EQ(a.join.minNodes, b.join.minNodes);
  EXPECT_EQ(a.join.maxNodes, b.join.maxNodes);
  EXPECT_EQ(a.join.lastCallMs, b.join.lastCallMs);
  EXPECT_EQ(a.join.keepAliveMs, b.join.keepAliveMs);
  EXPECT_EQ(a.join.address, b.join.address);
  EXPECT_EQ(a.join.masterPort, b.join.masterPort);
  EXPECT_EQ(a.node.rdzvId, b.node.rdzvId);
  EXPECT_EQ(a.node.nodeId, b.node.nodeId);
  EXPECT_EQ(a.node.round, b.node.round);
  EXPECT_EQ(a.node.maxRestarts, b.node.maxRestarts);
  EXPECT_EQ(a.node.exitCode, b.node.exitCode);
  EXPECT_EQ(a.node.report, b.node.report);
  EXPECT_EQ(a.rdzvId, b.rdzvId);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.delta, b.delta);
  EXPECT_EQ(a.timeoutMs, b.timeoutMs);
}

// Splits a framed message into header and body.
std::pair<FrameHeader, std::string_view> frameOf(const std::string& bytes) {
  FrameHeader header;
  EXPECT_EQ(parseFrameHeader(bytes, 1 << 30, header), ParseResult::kFrame);
  EXPECT_EQ(bytes.size(), kHeaderSize + header.bodySize);
  return {header, std::string_view(bytes).substr(kHeaderSize)};
}

TEST(Protocol, EveryRequestRoundTrips) {
  for (const Request& request : everyRequest()) {
    SCOPED_TRACE(opName(request.op));
    std::string bytes;
    encodeRequest(bytes, 77, request);
    auto [header, body] = frameOf(bytes);
    EXPECT_EQ(header.requestId, 77u);
    EXPECT_EQ(header.code, static_cast<std::uint8_t>(request.op));
    Request decoded;
    const auto error = decodeRequest(header.code, body, Limits{}, decoded);
    ASSERT_TRUE(error.ok()) << error.message;
    expectSame(request, decoded);
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
    for (std::size_t cut = 0; cut < body.size(); ++cut) {
      SCOPED_TRACE(std::string(opName(request.op)) + " cut at " + std::to_string(cut));
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

TEST(Protocol, PartialHeaderNeedsMore) {
  FrameHeader header;
  for (std::size_t n = 0; n < kHeaderSize; ++n) {
    EXPECT_EQ(parseFrameHeader(std::string(n, '\0'), 100, header), ParseResult::kNeedMore);
  }
}

TEST(Protocol, TrailingBytesAreRefused) {
  std::string bytes;
  Request set;
  set.op = Op::kSet;
  set.keys = {"k"};
  set.values = {"v"};
  encodeRequest(bytes, 1, set);
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
  Request longKey;
  longKey.op = Op::kSet;
  longKey.keys = {"12345"};
  longKey.values = {"v"};
  Request longValue;
  longValue.op = Op::kAppend;
  longValue.keys = {"k"};
  longValue.values = {"123456789"};
  Request manyKeys;
  manyKeys.op = Op::kCheck;
  manyKeys.keys = {"a", "b", "c"};
  for (const Case& c : {Case{longKey, "key"}, Case{longValue, "value"}, Case{manyKeys, "keys"}}) {
    std::string bytes;
    encodeRequest(bytes, 1, c.request);
    auto [header, body] = frameOf(bytes);
    Request decoded;
    const auto error = decodeRequest(header.code, body, tiny, decoded);
    EXPECT_EQ(error.status, Status::kTooLarge) << c.what;
    EXPECT_NE(error.message.find(c.what), std::string::npos) << error.message;
  }
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
  for (int code : {0, 18, 100, 255}) {
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
    const auto code = static_cast<std::uint8_t>(random() % 19);
    const auto error = decodeRequest(code, body, Limits{}, request);
    if (!error.ok()) {
      EXPECT_FALSE(error.message.empty());
    }
    Reply reply;
    std::string message;
    decodeReply(static_cast<Op>(1 + random() % 17), static_cast<std::uint8_t>(random() % 11), body,
                reply, message);
  }
}

// One reply of every op (and of every layout), with fields that are not
// all zero.
struct ReplyCase {
  Op op;
  Reply reply;
};
std::vector<ReplyCase> everyReply() {
  std::vector<ReplyCase> cases;
  Reply hello;
  hello.values = {"server"};
  hello.version = 1;
  cases.push_back({Op::kHello, hello});
  for (Op op : {Op::kGet, Op::kCompareSet, Op::kPing}) {
    Reply r;
    r.values = {std::string("bytes\0", 6)};
    cases.push_back({op, r});
  }
  Reply multi;
  multi.values = {"a", "", "ccc"};
  cases.push_back({Op::kMultiGet, multi});
  for (Op op : {Op::kAdd, Op::kNumKeys}) {
    Reply r;
    r.integer = -9'000'000'000LL;
    cases.push_back({op, r});
  }
  for (Op op : {Op::kCheck, Op::kDeleteKey}) {
    Reply r;
    r.flag = true;
    cases.push_back({op, r});
  }
  for (Op op : {Op::kSet, Op::kAppend, Op::kWait, Op::kMultiSet, Op::kLeave}) {
    cases.push_back({op, Reply{}});
  }
  Reply joined;
  joined.assignment = {3, 1, 2, 8, 16, 1, "10.0.0.1", 29500};
  cases.push_back({Op::kJoin, joined});
  Reply decision;
  decision.integer = 2;
  decision.flag = true;
  cases.push_back({Op::kReportFailure, decision});
  Reply status;
  status.rendezvous = {true, 4, false, 3, 2, 8, 12345, 20, {"node rank 1", "node n7 (10.0.0.7)"}};
  cases.push_back({Op::kRendezvousStatus, status});
  return cases;
}

TEST(Protocol, EveryReplyRoundTrips) {
  for (const ReplyCase& c : everyReply()) {
    SCOPED_TRACE(opName(c.op));
    std::string bytes;
    encodeReply(bytes, 5, c.op, c.reply);
    auto [header, body] = frameOf(bytes);
    Reply decoded;
    std::string error;
    ASSERT_TRUE(decodeReply(c.op, header.code, body, decoded, error)) << error;
    EXPECT_EQ(decoded.status, Status::kOk);
    EXPECT_EQ(decoded.values, c.reply.values);
    EXPECT_EQ(decoded.integer, c.reply.integer);
    EXPECT_EQ(decoded.flag, c.reply.flag);
    EXPECT_EQ(decoded.assignment.round, c.reply.assignment.round);
    EXPECT_EQ(decoded.assignment.rankOffset, c.reply.assignment.rankOffset);
    EXPECT_EQ(decoded.assignment.masterAddr, c.reply.assignment.masterAddr);
    EXPECT_EQ(decoded.assignment.masterPort, c.reply.assignment.masterPort);
    const auto& st = decoded.rendezvous;
    const auto& want = c.reply.rendezvous;
    EXPECT_EQ(std::tie(st.exists, st.round, st.running, st.joined, st.minNodes, st.maxNodes,
                       st.lastCallMs, st.missingCount, st.missing),
              std::tie(want.exists, want.round, want.running, want.joined, want.minNodes,
                       want.maxNodes, want.lastCallMs, want.missingCount, want.missing));
    // A reply cut short is refused.
    if (!body.empty()) {
      EXPECT_FALSE(decodeReply(c.op, header.code, body.substr(0, body.size() - 1), decoded, error));
    }
  }
}

TEST(Protocol, ErrorRepliesCarryTheirMessage) {
  std::string bytes;
  encodeError(bytes, 3, Status::kTimeout, "WAIT timed out waiting for key 'x'");
  auto [header, body] = frameOf(bytes);
  Reply reply;
  std::string error;
  ASSERT_TRUE(decodeReply(Op::kWait, header.code, body, reply, error));
  EXPECT_EQ(reply.status, Status::kTimeout);
  EXPECT_EQ(reply.message, "WAIT timed out waiting for key 'x'");
  EXPECT_FALSE(decodeReply(Op::kWait, 200, body, reply, error));
}

// A closed rendezvous answers with the job's exit code and report as fields,
// not packed into the message text.
TEST(Protocol, ClosedRepliesCarryTheJobsOutcome) {
  std::string bytes;
  encodeClosed(bytes, 4, "the rendezvous is closed", {137, "exit_code=3\nrank 5 was killed"});
  auto [header, body] = frameOf(bytes);
  Reply reply;
  std::string error;
  ASSERT_TRUE(decodeReply(Op::kJoin, header.code, body, reply, error)) << error;
  EXPECT_EQ(reply.status, Status::kClosed);
  EXPECT_EQ(reply.message, "the rendezvous is closed");
  EXPECT_EQ(reply.failure.exitCode, 137);
  EXPECT_EQ(reply.failure.report, "exit_code=3\nrank 5 was killed");  // text is just text
  EXPECT_FALSE(decodeReply(Op::kJoin, header.code, body.substr(0, body.size() - 1), reply, error));
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
  for (const ReplyCase& c : everyReply()) encodeReply(all, 9, c.op, c.reply);
  encodeError(all, 3, Status::kTimeout, "WAIT timed out");
  encodeClosed(all, 4, "the rendezvous is closed", {137, "rank 5 was killed"});
  encodeEvent(all, {EventType::kRoundEnded, "job", 2, 0, "node n1 was lost"});
  std::uint64_t digest = 1469598103934665603ULL;
  for (const unsigned char c : all) {
    digest ^= c;
    digest *= 1099511628211ULL;
  }
  EXPECT_EQ(digest, 0xdb7d26d408d00b03ULL) << std::hex << digest;
}

TEST(Protocol, TimeoutConversionClamps) {
  using std::chrono::milliseconds;
  EXPECT_EQ(toTimeoutMs(milliseconds(-5)), 0u);
  EXPECT_EQ(toTimeoutMs(milliseconds(250)), 250u);
  EXPECT_EQ(toTimeoutMs(milliseconds(1LL << 40)), kNoTimeout);
}

}  // namespace
}  // namespace ddprun::rendezvous::protocol
