// The resumable TCPStore request decoder: the same requests whole or in
// pieces, input consumed as fields complete, limits checked before bytes
// are kept.
#include "ddprun/rendezvous/tcpstore_codec.h"

#include <gtest/gtest.h>

#include <random>

namespace ddprun::rendezvous::tcpstore {
namespace {

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string u32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
std::string op(int code) { return std::string(1, static_cast<char>(code)); }

struct Fed {
  std::vector<Request> requests;
  Parse last = Parse::kNeedMore;
  std::string error;
  std::size_t maxUnconsumed = 0;  // the most bytes the input ever had to keep
};

// Feeds `bytes` in chunks of `chunk` bytes into an input that keeps what the
// decoder did not consume, as a session's buffer does.
Fed feedAll(const std::string& bytes, std::size_t chunk, Dialect dialect = Dialect::kV2,
            DecoderLimits limits = {}) {
  Decoder decoder(dialect, limits);
  Fed fed;
  std::string input;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    input += bytes.substr(at, chunk);
    for (;;) {
      Request r;
      std::size_t used = 0;
      fed.last = decoder.feed(input, used, r, fed.error);
      input.erase(0, used);
      fed.maxUnconsumed = std::max(fed.maxUnconsumed, input.size());
      if (fed.last == Parse::kError) return fed;
      if (fed.last == Parse::kNeedMore) break;
      fed.requests.push_back(std::move(r));
    }
  }
  return fed;
}

std::string everyV2Request() {
  return op(0) + u32(kValidateMagic) +                                  // VALIDATE
         "\x01" + str("k") + str("v") +                                 // SET
         "\x02" + str("k") + str("v") + str("w") +                      // COMPARE_SET
         "\x03" + str("k") +                                            // GET
         "\x04" + str("n") + u64(static_cast<std::uint64_t>(-3)) +      // ADD -3
         "\x05" + u64(2) + str("a") + str("b") +                        // CHECK
         "\x06" + u64(1) + str("a") +                                   // WAIT
         "\x07" +                                                       // GET_NUM_KEYS
         "\x08" + str("k") +                                            // DELETE_KEY
         "\x09" + str("log") + str("line") +                            // APPEND
         "\x0A" + u64(2) + str("a") + str("b") +                        // MULTI_GET
         "\x0B" + u64(2) + str("a") + str("1") + str("b") + str("2") +  // MULTI_SET
         "\x0C" +                                                       // CANCEL_WAIT
         "\x0D" + u32(42) +                                             // PING
         "\x0E" + str("q") + str("item") +                              // QUEUE_PUSH
         "\x0F" + str("q") +                                            // QUEUE_POP
         "\x10" + str("q") +                                            // QUEUE_LEN
         "\x11" +                                                       // LIST_KEYS
         "\x12" + str("b") + u64(4);                                    // BARRIER of 4
}

TEST(TcpStoreDecoder, WholeAndByteByByteGiveTheSameRequests) {
  const std::string bytes = everyV2Request();
  const Fed whole = feedAll(bytes, bytes.size());
  ASSERT_EQ(whole.last, Parse::kNeedMore) << whole.error;
  ASSERT_EQ(whole.requests.size(), 19u);
  for (std::size_t chunk : {1, 3, 7, 64}) {
    SCOPED_TRACE(chunk);
    const Fed pieces = feedAll(bytes, chunk);
    ASSERT_EQ(pieces.requests.size(), whole.requests.size()) << pieces.error;
    for (std::size_t i = 0; i < whole.requests.size(); ++i) {
      EXPECT_EQ(pieces.requests[i].op, whole.requests[i].op);
      EXPECT_EQ(pieces.requests[i].keys, whole.requests[i].keys);
      EXPECT_EQ(pieces.requests[i].values, whole.requests[i].values);
      EXPECT_EQ(pieces.requests[i].delta, whole.requests[i].delta);
      EXPECT_EQ(pieces.requests[i].word, whole.requests[i].word);
    }
  }
  const auto& r = whole.requests;
  EXPECT_EQ(r[1].op, Op::kSet);
  EXPECT_EQ(r[2].values, (std::vector<std::string>{"v", "w"}));
  EXPECT_EQ(r[4].delta, -3);
  EXPECT_EQ(r[11].keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r[11].values, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(r[13].word, 42u);
  EXPECT_EQ(r[14].op, Op::kQueuePush);
  EXPECT_EQ(r[14].values, (std::vector<std::string>{"item"}));
  EXPECT_EQ(r[15].op, Op::kQueuePop);
  EXPECT_EQ(r[16].op, Op::kQueueLen);
  EXPECT_EQ(r[16].keys, (std::vector<std::string>{"q"}));
  EXPECT_EQ(r[17].op, Op::kListKeys);
  EXPECT_EQ(r[18].op, Op::kBarrier);
  EXPECT_EQ(r[18].keys, (std::vector<std::string>{"b"}));
  EXPECT_EQ(r[18].delta, 4);
}

TEST(TcpStoreDecoder, The113DialectHasItsOwnOpcodes) {
  const Fed fed = feedAll(
      op(0) + str("k") + str("v") + op(3) + str("n") + u64(7) + op(7) + str("w"), 2, Dialect::kV1);
  ASSERT_EQ(fed.requests.size(), 3u) << fed.error;
  EXPECT_EQ(fed.requests[0].op, Op::kSet);
  EXPECT_EQ(fed.requests[1].op, Op::kAdd);
  EXPECT_EQ(fed.requests[1].delta, 7);
  EXPECT_EQ(fed.requests[2].op, Op::kWatchKey);
  EXPECT_EQ(fed.last, Parse::kNeedMore);
}

// A huge MULTI_SET arriving in small pieces is parsed once: the input never
// keeps more than one partial field, whatever the request's total size.
TEST(TcpStoreDecoder, ALongRequestKeepsOnlyOnePartialFieldInTheInput) {
  std::string bytes = "\x0B" + u64(20000);
  for (int i = 0; i < 20000; ++i) bytes += str("key" + std::to_string(i)) + str("value");
  const Fed fed = feedAll(bytes, 5);
  ASSERT_EQ(fed.requests.size(), 1u) << fed.error;
  EXPECT_EQ(fed.requests[0].keys.size(), 20000u);
  EXPECT_LE(fed.maxUnconsumed, 8u + 8u + 5u);  // a length prefix and a partial key
}

TEST(TcpStoreDecoder, LimitsAreCheckedBeforeTheBytesArrive) {
  DecoderLimits limits;
  limits.maxKeyBytes = 100;
  limits.maxValueBytes = 1000;
  limits.maxKeysPerRequest = 10;
  limits.maxRequestBytes = 2000;
  // Only the length prefix of a 1 TiB value is sent.
  Fed fed = feedAll("\x01" + str("k") + u64(1ULL << 40), 64, Dialect::kV2, limits);
  EXPECT_EQ(fed.last, Parse::kError);
  EXPECT_NE(fed.error.find("value of 1099511627776 bytes is over the limit of 1000"),
            std::string::npos)
      << fed.error;
  fed = feedAll("\x03" + u64(101), 64, Dialect::kV2, limits);
  EXPECT_NE(fed.error.find("key of 101 bytes"), std::string::npos) << fed.error;
  fed = feedAll("\x06" + u64(11), 64, Dialect::kV2, limits);
  EXPECT_NE(fed.error.find("names 11 keys, over the limit of 10"), std::string::npos) << fed.error;
  // Three values of 900 bytes fit each field's limit but not the request's.
  std::string three = "\x0B" + u64(3);
  for (int i = 0; i < 3; ++i) three += str("k") + str(std::string(900, 'v'));
  fed = feedAll(three, 64, Dialect::kV2, limits);
  EXPECT_NE(fed.error.find("request is over the limit of 2000 bytes"), std::string::npos)
      << fed.error;
}

TEST(TcpStoreDecoder, UnknownOpcodesAreErrors) {
  EXPECT_EQ(feedAll("\x63", 1).last, Parse::kError);
  const Fed past = feedAll("\x13", 1);  // 19: past PyTorch 2.14's BARRIER
  EXPECT_EQ(past.last, Parse::kError);
  EXPECT_NE(past.error.find("opcode 19"), std::string::npos) << past.error;
  EXPECT_NE(past.error.find("newer ddprun"), std::string::npos) << past.error;
  EXPECT_EQ(feedAll("\x09", 1, Dialect::kV1).last, Parse::kError);  // no APPEND in 1.13
}

TEST(TcpStoreDecoder, GarbageNeverCrashes) {
  std::mt19937 random(7);
  DecoderLimits limits;
  limits.maxRequestBytes = 1 << 16;
  for (int i = 0; i < 5000; ++i) {
    std::string bytes(random() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(random() % 20);  // mostly valid opcodes, tiny sizes
    feedAll(bytes, 1 + random() % 16, random() % 2 ? Dialect::kV1 : Dialect::kV2, limits);
  }
}

}  // namespace
}  // namespace ddprun::rendezvous::tcpstore
