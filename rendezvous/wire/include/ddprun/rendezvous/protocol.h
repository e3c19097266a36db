// The ddprun native store protocol: pure encoding and decoding, no I/O.
//
// docs/protocol.md is the specification; this file is its implementation.
// In short: a client opens a connection with the 4-byte preamble "DDPR" and
// a HELLO frame carrying its protocol version and the token. After that,
// both sides exchange frames
//
//     u32 body_size | u32 request_id | u8 code | body (body_size bytes)
//
// (all integers little-endian). In a request `code` is an Op; in a reply it
// is a Status and the request id is echoed, so one connection can carry
// several requests at once (a heartbeat while a WAIT is pending). Request id
// 0 is reserved for frames the server pushes on its own (kGoodbye).
//
// Everything here works on byte strings (std::string / std::string_view) and
// never allocates more than the bytes actually present: sizes claimed in a
// header are checked against Limits before anything is reserved.
//
// Thread-safety: free functions and plain structs, no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/messages.h"

namespace ddprun::rendezvous::protocol {

inline constexpr std::string_view kPreamble = "DDPR";
inline constexpr std::size_t kHeaderSize = 9;

// Size limits, enforced when decoding (server) and before sending (client).
struct Limits {
  std::size_t maxKeyBytes = 64 * 1024;
  std::size_t maxValueBytes = 32 * 1024 * 1024;
  std::size_t maxFrameBytes = 64 * 1024 * 1024;
  std::size_t maxKeysPerRequest = 1 << 20;
};

struct FrameHeader {
  std::uint32_t bodySize = 0;
  std::uint32_t requestId = 0;
  std::uint8_t code = 0;
};

// --- framing ---------------------------------------------------------------

enum class ParseResult { kNeedMore, kFrame, kTooLarge };

// Looks at the front of `input`. kFrame: `header` is filled and the whole
// body (header.bodySize bytes after kHeaderSize) is present. kTooLarge: the
// header claims a body over `maxFrameBytes` (header is still filled).
ParseResult parseFrameHeader(std::string_view input, std::size_t maxFrameBytes,
                             FrameHeader& header);

void appendHeader(std::string& out, std::uint32_t requestId, std::uint8_t code,
                  std::uint32_t bodySize);

// --- requests --------------------------------------------------------------

// Result of decoding or checking: kOk, or an error status and a message.
struct DecodeError {
  Status status = Status::kOk;
  std::string message;
  bool ok() const { return status == Status::kOk; }
};

// Appends the framed request to `out`.
void encodeRequest(std::string& out, std::uint32_t requestId, const Request& request);

// Decodes the body of a request frame whose header code is `code`.
DecodeError decodeRequest(std::uint8_t code, std::string_view body, const Limits& limits,
                          Request& request);

// What decodeRequest() would refuse under `limits` (a key, value or count
// over its limit, a body over the frame limit), found without encoding:
// clients check before sending.
DecodeError checkRequest(const Request& request, const Limits& limits);

// Whether `allowed` holds for every store key that `request` names (HELLO
// and the rendezvous ops name none); stops at the first refusal. The
// server's access check.
bool allStoreKeys(const Request& request, const std::function<bool(std::string_view)>& allowed);

// --- replies ---------------------------------------------------------------

// Append a framed kOk reply. A request of type M is answered with an
// M::Reply (the server's sessions enforce the pairing).
void encodeReply(std::string& out, std::uint32_t requestId, const EmptyReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const ValueReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const ValuesReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const IntegerReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const FlagReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const QueuePopReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const HelloReply& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const Assignment& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const RestartDecision& reply);
void encodeReply(std::string& out, std::uint32_t requestId, const RendezvousStatus& reply);

// Decode the body of a kOk reply; false when it does not match the layout.
bool decodeReply(std::string_view body, EmptyReply& reply);
bool decodeReply(std::string_view body, ValueReply& reply);
bool decodeReply(std::string_view body, ValuesReply& reply);
bool decodeReply(std::string_view body, IntegerReply& reply);
bool decodeReply(std::string_view body, FlagReply& reply);
bool decodeReply(std::string_view body, QueuePopReply& reply);
bool decodeReply(std::string_view body, HelloReply& reply);
bool decodeReply(std::string_view body, Assignment& reply);
bool decodeReply(std::string_view body, RestartDecision& reply);
bool decodeReply(std::string_view body, RendezvousStatus& reply);

// Appends a framed error reply (any status but kOk and kClosed).
void encodeError(std::string& out, std::uint32_t requestId, Status status,
                 std::string_view message);
// Appends a CLOSED reply: the message, then the job's exit code and report
// (docs/protocol.md §10b), typed instead of packed into the text.
void encodeClosed(std::string& out, std::uint32_t requestId, std::string_view message,
                  const JobFailure& failure);
// Decodes a reply frame whose status `code` is not kOk (nor kEvent); false
// when the code is unknown or the body does not match.
bool decodeError(std::uint8_t code, std::string_view body, ErrorReply& reply);

// Appends a kEvent push (request id 0).
void encodeEvent(std::string& out, const Event& event);
// Decodes the body of a kEvent push.
bool decodeEvent(std::string_view body, Event& event);

}  // namespace ddprun::rendezvous::protocol
