// readReplies: the one reader of the store's frames that both native
// clients (StoreClient's connection, the node relay's upstream) use.
#include "ddprun/rendezvous/reply_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun::rendezvous {
namespace {

using protocol::Status;
using Kind = ReceivedFrame::Kind;

void feed(InputBuffer& input, const std::string& bytes) {
  std::size_t space = 0;
  char* into = input.writable(bytes.size(), space);
  std::copy(bytes.begin(), bytes.end(), into);
  input.commit(bytes.size());
}

// What onFrame saw, copied out of the views.
struct Seen {
  Kind kind;
  std::uint32_t id;
  Status status;
  std::string body;
  std::string message;
  protocol::Event event;
};

std::vector<Seen> readAll(InputBuffer& input, std::optional<std::string>* broken = nullptr) {
  std::vector<Seen> seen;
  auto result = readReplies(input, 1024, [&seen](ReceivedFrame& f) {
    seen.push_back({f.kind, f.requestId, f.status, std::string(f.body), f.error.message, f.event});
    return true;
  });
  if (broken != nullptr) *broken = result;
  return seen;
}

TEST(ReplyReader, RepliesEventsAndTheStoresGoodbyeAreToldApart) {
  std::string bytes;
  protocol::encodeReply(bytes, 7, protocol::IntegerReply{42});
  protocol::encodeError(bytes, 8, Status::kNotInteger, "not an integer");
  protocol::Event event;
  event.rdzvId = "job";
  event.round = 3;
  event.message = "node b left";
  protocol::encodeEvent(bytes, event);
  protocol::encodeError(bytes, 0, Status::kGoodbye, "idle for 600 s");
  InputBuffer input;
  feed(input, bytes);

  const auto seen = readAll(input);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].kind, Kind::kReply);
  EXPECT_EQ(seen[0].id, 7u);
  EXPECT_EQ(seen[0].status, Status::kOk);
  protocol::IntegerReply integer;
  ASSERT_TRUE(protocol::decodeReply(seen[0].body, integer));
  EXPECT_EQ(integer.value, 42);
  EXPECT_EQ(seen[1].kind, Kind::kReply);
  EXPECT_EQ(seen[1].status, Status::kNotInteger);
  EXPECT_EQ(seen[1].message, "not an integer");
  EXPECT_EQ(seen[2].kind, Kind::kEvent);
  EXPECT_EQ(seen[2].event.round, 3);
  EXPECT_EQ(seen[2].event.message, "node b left");
  EXPECT_EQ(seen[3].kind, Kind::kGoodbye);
  EXPECT_EQ(seen[3].message, "idle for 600 s");
  EXPECT_TRUE(input.readable().empty());
}

TEST(ReplyReader, ARefusalAndAPushThatIsNoReplyEndTheConnection) {
  std::string bytes;
  protocol::encodeError(bytes, 0, Status::kAuthFailed, "bad token");
  protocol::appendHeader(bytes, 0, 0xEE, 3);  // not a status ddprun sends
  bytes += "xyz";
  InputBuffer input;
  feed(input, bytes);
  const auto seen = readAll(input);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, Kind::kRefusal);
  EXPECT_EQ(seen[0].message, "bad token");
  EXPECT_EQ(seen[1].kind, Kind::kRefusal);
  EXPECT_EQ(seen[1].status, Status::kBadRequest) << seen[1].message;
  EXPECT_NE(seen[1].message.find("not a ddprun reply"), std::string::npos) << seen[1].message;
}

TEST(ReplyReader, AnErrorBodyThatDoesNotDecodeIsABadRequestReply) {
  std::string bytes;
  protocol::appendHeader(bytes, 5, static_cast<std::uint8_t>(Status::kNotInteger), 1);
  bytes += "!";  // an error's message needs its length first
  InputBuffer input;
  feed(input, bytes);
  const auto seen = readAll(input);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, Kind::kReply);
  EXPECT_EQ(seen[0].id, 5u);
  EXPECT_EQ(seen[0].status, Status::kBadRequest);
  EXPECT_NE(seen[0].message.find("malformed body"), std::string::npos) << seen[0].message;
}

TEST(ReplyReader, AFrameInPiecesWaitsForItsBody) {
  std::string bytes;
  protocol::encodeError(bytes, 9, Status::kNotInteger, std::string(300, 'x'));
  InputBuffer input(64);
  feed(input, bytes.substr(0, protocol::kHeaderSize + 10));
  EXPECT_TRUE(readAll(input).empty());
  EXPECT_GE(input.capacity(), bytes.size());  // room made for the whole frame
  feed(input, bytes.substr(protocol::kHeaderSize + 10));
  const auto seen = readAll(input);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].message.size(), 300u);
}

TEST(ReplyReader, AFrameOverTheLimitBreaksTheStream) {
  std::string bytes;
  protocol::appendHeader(bytes, 1, 0, 4096);  // the test's limit is 1024
  InputBuffer input;
  feed(input, bytes);
  std::optional<std::string> broken;
  EXPECT_TRUE(readAll(input, &broken).empty());
  ASSERT_TRUE(broken.has_value());
  EXPECT_NE(broken->find("4096 bytes"), std::string::npos) << *broken;
}

TEST(ReplyReader, ACallerThatClosedStopsTheReadingWithTheFrameUnconsumed) {
  std::string bytes;
  protocol::encodeReply(bytes, 1, protocol::IntegerReply{1});
  protocol::encodeReply(bytes, 2, protocol::IntegerReply{2});
  InputBuffer input;
  feed(input, bytes);
  int calls = 0;
  EXPECT_FALSE(readReplies(input, 1024, [&calls](ReceivedFrame&) {
                 ++calls;
                 return false;
               }).has_value());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(input.readable().size(), bytes.size());
}

}  // namespace
}  // namespace ddprun::rendezvous
