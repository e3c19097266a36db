// frame_decoder_fuzz: libFuzzer target for the native protocol's decoder.
//
// The input is a byte stream as a store server receives it: an optional
// "DDPR" preamble, then frames. The stream is split into frames with
// parseFrameHeader under three frame limits (tiny, the 64 KiB pre-handshake
// limit and the default), and every frame body is decoded
//   - as a request, with the default Limits and with tiny Limits;
//   - as a reply to every Op (the client's decoder sees server bytes).
// Besides the sanitizers, it checks these properties and aborts on a
// violation:
//   - the three limits agree on the header and on where frames end;
//   - a decode error carries kBadRequest or kTooLarge and a message;
//   - what tiny Limits accept, the default Limits accept identically;
//   - a decoded request re-encodes to the same bytes, and that frame
//     decodes to an equal Request; a decoded reply re-encodes to a frame
//     that decodes to an equal Reply.
//
// Thread-safety: libFuzzer calls it from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/protocol.h"

namespace {

namespace protocol = ddprun::rendezvous::protocol;
using protocol::FrameHeader;
using protocol::Limits;
using protocol::Op;
using protocol::ParseResult;
using protocol::Reply;
using protocol::Request;
using protocol::Status;

// The server's frame limit before the handshake (session.cc).
constexpr std::size_t kHandshakeFrameBytes = 64 * 1024;
// Limits small enough that fuzzed inputs reach every kTooLarge branch.
constexpr Limits kTinyLimits{
    .maxKeyBytes = 8, .maxValueBytes = 16, .maxFrameBytes = 64, .maxKeysPerRequest = 3};
constexpr Limits kDefaultLimits{};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "frame_decoder_fuzz: property violated: %s\n", what);
  std::abort();
}

void expect(bool condition, const char* what) {
  if (!condition) fail(what);
}

std::uint32_t readU32(std::string_view bytes) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    v |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(bytes[i])) << (8 * i);
  }
  return v;
}

bool sameHeader(const FrameHeader& a, const FrameHeader& b) {
  return a.bodySize == b.bodySize && a.requestId == b.requestId && a.code == b.code;
}

bool sameJoin(const protocol::JoinRequest& a, const protocol::JoinRequest& b) {
  return a.rdzvId == b.rdzvId && a.nodeId == b.nodeId && a.nodeRank == b.nodeRank &&
         a.localWorldSize == b.localWorldSize && a.minNodes == b.minNodes &&
         a.maxNodes == b.maxNodes && a.lastCallMs == b.lastCallMs &&
         a.keepAliveMs == b.keepAliveMs && a.address == b.address && a.masterPort == b.masterPort &&
         a.maxRestarts == b.maxRestarts;
}

bool sameNode(const protocol::NodeReport& a, const protocol::NodeReport& b) {
  return a.rdzvId == b.rdzvId && a.nodeId == b.nodeId && a.round == b.round &&
         a.maxRestarts == b.maxRestarts && a.exitCode == b.exitCode && a.report == b.report;
}

bool sameAssignment(const protocol::Assignment& a, const protocol::Assignment& b) {
  return a.round == b.round && a.groupRank == b.groupRank && a.groupWorldSize == b.groupWorldSize &&
         a.rankOffset == b.rankOffset && a.worldSize == b.worldSize && a.restarts == b.restarts &&
         a.masterAddr == b.masterAddr && a.masterPort == b.masterPort;
}

bool sameRequest(const Request& a, const Request& b) {
  return a.op == b.op && a.keys == b.keys && a.values == b.values && a.delta == b.delta &&
         a.timeoutMs == b.timeoutMs && a.version == b.version && sameJoin(a.join, b.join) &&
         sameNode(a.node, b.node) && a.rdzvId == b.rdzvId;
}

bool sameReply(const Reply& a, const Reply& b) {
  return a.status == b.status && a.message == b.message && a.values == b.values &&
         a.integer == b.integer && a.flag == b.flag && a.version == b.version &&
         sameAssignment(a.assignment, b.assignment) && a.failure.exitCode == b.failure.exitCode &&
         a.failure.report == b.failure.report && a.rendezvous.exists == b.rendezvous.exists &&
         a.rendezvous.round == b.rendezvous.round && a.rendezvous.joined == b.rendezvous.joined &&
         a.rendezvous.missing == b.rendezvous.missing &&
         a.rendezvous.lastCallMs == b.rendezvous.lastCallMs;
}

// Splits a freshly encoded frame; it must be exactly one whole frame.
std::string_view wholeFrame(const std::string& frame, std::uint32_t id, std::uint8_t code) {
  FrameHeader header;
  expect(protocol::parseFrameHeader(frame, kDefaultLimits.maxFrameBytes, header) ==
             ParseResult::kFrame,
         "an encoded frame does not parse as a frame");
  expect(protocol::kHeaderSize + header.bodySize == frame.size(),
         "an encoded frame's size field does not match its length");
  expect(header.requestId == id && header.code == code,
         "an encoded frame's header does not carry its id and code");
  return std::string_view(frame).substr(protocol::kHeaderSize);
}

void checkDecodeError(const protocol::DecodeError& error) {
  if (error.ok()) return;
  expect(error.status == Status::kBadRequest || error.status == Status::kTooLarge,
         "a request decode error has a status other than kBadRequest/kTooLarge");
  expect(!error.message.empty(), "a request decode error has no message");
}

void fuzzRequest(const FrameHeader& header, std::string_view body) {
  Request request;
  const auto error = protocol::decodeRequest(header.code, body, kDefaultLimits, request);
  checkDecodeError(error);

  Request tiny;
  const auto tinyError = protocol::decodeRequest(header.code, body, kTinyLimits, tiny);
  checkDecodeError(tinyError);
  if (tinyError.ok()) {
    expect(error.ok(), "tiny Limits accept a request the default Limits refuse");
    expect(sameRequest(request, tiny), "tiny and default Limits decode different requests");
  }
  if (!protocol::isKnownOp(header.code)) {
    expect(error.status == Status::kBadRequest, "an unknown op is not a bad request");
  }
  if (!error.ok()) return;
  expect(protocol::isKnownOp(header.code) && static_cast<std::uint8_t>(request.op) == header.code,
         "a decoded request's op differs from the frame's code");

  // Round trip: encoding is canonical, so the body comes back byte for byte.
  std::string frame;
  protocol::encodeRequest(frame, header.requestId, request);
  const std::string_view again = wholeFrame(frame, header.requestId, header.code);
  expect(again == body, "a decoded request re-encodes to different bytes");
  Request decodedAgain;
  const auto againError = protocol::decodeRequest(header.code, again, kDefaultLimits, decodedAgain);
  expect(againError.ok(), "a re-encoded request does not decode");
  expect(sameRequest(request, decodedAgain), "a re-encoded request decodes to another request");
}

void fuzzEvent(std::string_view body) {
  protocol::Event event;
  if (!protocol::decodeEvent(body, event)) return;
  std::string frame;
  protocol::encodeEvent(frame, event);
  const std::string_view again = wholeFrame(frame, 0, static_cast<std::uint8_t>(Status::kEvent));
  expect(again == body, "a decoded event re-encodes to different bytes");
}

void fuzzReplies(const FrameHeader& header, std::string_view body) {
  fuzzEvent(body);
  for (std::uint8_t code = static_cast<std::uint8_t>(Op::kHello);
       code <= static_cast<std::uint8_t>(Op::kRendezvousStatus); ++code) {
    const Op op = static_cast<Op>(code);
    Reply reply;
    std::string error;
    if (!protocol::decodeReply(op, header.code, body, reply, error)) {
      expect(!error.empty(), "a refused reply has no error message");
      continue;
    }
    expect(static_cast<std::uint8_t>(reply.status) == header.code,
           "a decoded reply's status differs from the frame's code");
    std::string frame;
    if (reply.status == Status::kOk) {
      protocol::encodeReply(frame, header.requestId, op, reply);
    } else if (reply.status == Status::kClosed) {
      protocol::encodeClosed(frame, header.requestId, reply.message, reply.failure);
    } else {
      protocol::encodeError(frame, header.requestId, reply.status, reply.message);
    }
    // Not byte for byte: a flag byte other than 0 reads as true and is
    // written back as 1.
    const std::string_view again = wholeFrame(frame, header.requestId, header.code);
    Reply decodedAgain;
    expect(protocol::decodeReply(op, header.code, again, decodedAgain, error),
           "a re-encoded reply does not decode");
    expect(sameReply(reply, decodedAgain), "a re-encoded reply decodes to another reply");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view stream(reinterpret_cast<const char*>(data), size);
  // The server consumes the preamble before any frame; streams without it
  // are fuzzed as frames from the first byte.
  if (stream.starts_with(protocol::kPreamble)) stream.remove_prefix(protocol::kPreamble.size());

  const std::size_t limits[] = {kTinyLimits.maxFrameBytes, kHandshakeFrameBytes,
                                kDefaultLimits.maxFrameBytes};
  for (;;) {
    FrameHeader headers[3];
    ParseResult results[3];
    for (int i = 0; i < 3; ++i) {
      results[i] = protocol::parseFrameHeader(stream, limits[i], headers[i]);
    }
    if (stream.size() < protocol::kHeaderSize) {
      for (ParseResult r : results) {
        expect(r == ParseResult::kNeedMore, "a partial header is not kNeedMore");
      }
      break;
    }
    const std::uint32_t bodySize = readU32(stream);
    const bool complete = stream.size() - protocol::kHeaderSize >= bodySize;
    for (int i = 0; i < 3; ++i) {
      expect(sameHeader(headers[i], headers[0]), "the frame limits disagree on the header");
      expect(headers[i].bodySize == bodySize && headers[i].requestId == readU32(stream.substr(4)) &&
                 headers[i].code == static_cast<std::uint8_t>(stream[8]),
             "the parsed header is not the little-endian bytes");
      const ParseResult want = bodySize > limits[i] ? ParseResult::kTooLarge
                               : complete           ? ParseResult::kFrame
                                                    : ParseResult::kNeedMore;
      expect(results[i] == want, "parseFrameHeader's verdict is wrong for its limit");
    }
    if (results[2] != ParseResult::kFrame) break;  // as the server: stop reading

    const FrameHeader& header = headers[2];
    const std::string_view body = stream.substr(protocol::kHeaderSize, header.bodySize);
    fuzzRequest(header, body);
    fuzzReplies(header, body);
    stream.remove_prefix(protocol::kHeaderSize + header.bodySize);
  }
  return 0;
}
