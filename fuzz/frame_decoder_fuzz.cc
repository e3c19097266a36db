// frame_decoder_fuzz: libFuzzer target for the native protocol's decoder.
//
// The input is a byte stream as a store server receives it: an optional
// "DDPR" preamble, then frames. The stream is split into frames with
// parseFrameHeader under three frame limits (tiny, the 64 KiB pre-handshake
// limit and the default), and every frame body is decoded
//   - as a request, with the default Limits and with tiny Limits;
//   - as every OK reply layout and as an error reply (the client's decoder
//     sees server bytes).
// Besides the sanitizers, it checks these properties and aborts on a
// violation:
//   - the three limits agree on the header and on where frames end;
//   - a decode error carries kBadRequest or kTooLarge and a message;
//   - what tiny Limits accept, the default Limits accept identically;
//   - the client's checkRequest() agrees with the decoder: it accepts a
//     decoded request under the Limits that decoded it, and refuses as too
//     large what only the tiny Limits refuse;
//   - a decoded request re-encodes to the same bytes, and that frame
//     decodes to an equal Request; a decoded reply re-encodes to a frame
//     that decodes to an equal reply.
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
using protocol::ParseResult;
using protocol::Request;
using protocol::Status;

// The server's frame limit before the handshake (native_session.cc).
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
    expect(request == tiny, "tiny and default Limits decode different requests");
  }
  if (!protocol::isKnownOp(header.code)) {
    expect(error.status == Status::kBadRequest, "an unknown op is not a bad request");
  }
  if (!error.ok()) return;
  expect(protocol::isKnownOp(header.code) &&
             static_cast<std::uint8_t>(protocol::opOf(request)) == header.code,
         "a decoded request's op differs from the frame's code");

  // The client's check before sending agrees with the server's decoder.
  expect(protocol::checkRequest(request, kDefaultLimits).ok(),
         "checkRequest refuses a request the default Limits decode");
  const auto tinyCheck = protocol::checkRequest(request, kTinyLimits);
  if (tinyError.ok() && body.size() <= kTinyLimits.maxFrameBytes) {
    expect(tinyCheck.ok(), "checkRequest refuses a request the tiny Limits decode");
  }
  if (!tinyError.ok()) {
    expect(tinyError.status == Status::kTooLarge,
           "a well-formed request is refused by tiny Limits as other than too large");
    expect(tinyCheck.status == Status::kTooLarge,
           "checkRequest accepts a request the tiny Limits refuse");
  }

  // Round trip: encoding is canonical, so the body comes back byte for byte.
  std::string frame;
  protocol::encodeRequest(frame, header.requestId, request);
  const std::string_view again = wholeFrame(frame, header.requestId, header.code);
  expect(again == body, "a decoded request re-encodes to different bytes");
  Request decodedAgain;
  const auto againError = protocol::decodeRequest(header.code, again, kDefaultLimits, decodedAgain);
  expect(againError.ok(), "a re-encoded request does not decode");
  expect(request == decodedAgain, "a re-encoded request decodes to another request");
}

void fuzzEvent(std::string_view body) {
  protocol::Event event;
  if (!protocol::decodeEvent(body, event)) return;
  std::string frame;
  protocol::encodeEvent(frame, event);
  const std::string_view again = wholeFrame(frame, 0, static_cast<std::uint8_t>(Status::kEvent));
  expect(again == body, "a decoded event re-encodes to different bytes");
}

// An OK reply body of layout Body: decoded, re-encoded and decoded again.
// Not byte for byte: a flag byte other than 0 reads as true and is written
// back as 1.
template <typename Body>
void fuzzOkReply(const FrameHeader& header, std::string_view body) {
  Body reply;
  if (!protocol::decodeReply(body, reply)) return;
  std::string frame;
  protocol::encodeReply(frame, header.requestId, reply);
  const std::string_view again =
      wholeFrame(frame, header.requestId, static_cast<std::uint8_t>(Status::kOk));
  Body decodedAgain;
  expect(protocol::decodeReply(again, decodedAgain), "a re-encoded reply does not decode");
  expect(reply == decodedAgain, "a re-encoded reply decodes to another reply");
}

void fuzzErrorReply(const FrameHeader& header, std::string_view body) {
  protocol::ErrorReply reply;
  if (!protocol::decodeError(header.code, body, reply)) return;
  expect(static_cast<std::uint8_t>(reply.status) == header.code,
         "a decoded error's status differs from the frame's code");
  std::string frame;
  if (reply.status == Status::kClosed) {
    protocol::encodeClosed(frame, header.requestId, reply.message, reply.failure);
  } else {
    protocol::encodeError(frame, header.requestId, reply.status, reply.message);
  }
  const std::string_view again = wholeFrame(frame, header.requestId, header.code);
  expect(again == body, "a decoded error re-encodes to different bytes");
}

void fuzzReplies(const FrameHeader& header, std::string_view body) {
  fuzzEvent(body);
  fuzzErrorReply(header, body);
  fuzzOkReply<protocol::EmptyReply>(header, body);
  fuzzOkReply<protocol::ValueReply>(header, body);
  fuzzOkReply<protocol::ValuesReply>(header, body);
  fuzzOkReply<protocol::IntegerReply>(header, body);
  fuzzOkReply<protocol::FlagReply>(header, body);
  fuzzOkReply<protocol::HelloReply>(header, body);
  fuzzOkReply<protocol::Assignment>(header, body);
  fuzzOkReply<protocol::RestartDecision>(header, body);
  fuzzOkReply<protocol::RendezvousStatus>(header, body);
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
