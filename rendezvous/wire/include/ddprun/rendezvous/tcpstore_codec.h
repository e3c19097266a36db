// The PyTorch TCPStore wire protocol, server side: decoding requests and
// encoding replies of the 1.13/2.0 dialect (no handshake) and the 2.2+
// dialect (VALIDATE first, PING in 2.5+, queues in 2.8+, LIST_KEYS in 2.10+,
// BARRIER in 2.11+). Pure functions on bytes; see
// docs/protocol.md "TCPStore dialects" and the reference notes.
//
// Integers are host-order (little-endian) u64/i64/u32; strings are a u64
// length and the bytes. There are no frames: a request is an opcode byte and
// its fields, so decoding works on a byte stream and may need more bytes.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous::tcpstore {

enum class Dialect { kV1, kV2 };

// The operations, whatever their number in each dialect.
enum class Op {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,  // 2.8+
  kQueuePop,   // 2.8+
  kQueueLen,   // 2.8+
  kListKeys,   // 2.10+
  kBarrier,    // 2.11+
};

// "SET", "MULTI_GET", ... (metrics labels).
const char* opName(Op op);

inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

struct Request {
  Op op = Op::kSet;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t delta = 0;  // ADD's delta or BARRIER's world size
  std::uint32_t word = 0;  // VALIDATE magic or PING nonce
};

enum class Parse { kNeedMore, kRequest, kError };

// What one request may hold. Checked as the fields arrive, before anything
// is allocated for them.
struct DecoderLimits {
  std::size_t maxKeyBytes = 64 * 1024;
  std::size_t maxValueBytes = 32 * 1024 * 1024;
  std::size_t maxKeysPerRequest = 1 << 20;
  // All of one request's fields together, with a per-field overhead.
  std::size_t maxRequestBytes = 64 * 1024 * 1024;
};

// The store's limits (the native protocol's) as a TCPStore decoder's: the
// same for a store's TCPStore session and a node relay's.
inline DecoderLimits decoderLimits(const protocol::Limits& limits) {
  return {limits.maxKeyBytes, limits.maxValueBytes, limits.maxKeysPerRequest, limits.maxFrameBytes};
}

// The bytes charged per key or value in a request beyond its text.
inline constexpr std::size_t kFieldOverheadBytes = 32;

// One connection's request parser. It is resumable: each complete field is
// moved into the request under construction and its bytes are consumed at
// once, so a request that arrives over many reads is parsed exactly once
// (linear time) and the input only ever holds one partial field.
//
// Thread-safety: one connection's; not thread-safe.
class Decoder {
 public:
  Decoder(Dialect dialect, DecoderLimits limits) : dialect_(dialect), limits_(limits) {}

  // Parses from the front of `input`; `consumed` bytes of it were used
  // (also on kNeedMore: drop them from the input). On kRequest `request`
  // holds the next request and the decoder starts afresh. On kError
  // `error` says why (unknown opcode, a field or request over the limits):
  // close the connection.
  Parse feed(std::string_view input, std::size_t& consumed, Request& request, std::string& error);

  // Bytes held by the request under construction (fields + overheads).
  std::size_t heldBytes() const { return held_; }

 private:
  enum class Field { kNone, kWord, kDelta, kCount, kKey, kValue, kDone };
  Field next() const;
  void reset();

  Dialect dialect_;
  DecoderLimits limits_;
  bool haveOp_ = false;
  Request request_;
  bool haveWord_ = false;
  bool haveDelta_ = false;
  bool haveCount_ = false;
  std::uint64_t count_ = 0;
  std::size_t held_ = 0;
};

// What a connection's first bytes show (docs/protocol.md "TCPStore
// dialects"): the native preamble's first byte, a TCPStore 2.2+ client's
// VALIDATE (its 5 bytes are the handshake: consume them), any other
// TCPStore opcode (1.13/2.0; a 0x00 may be 1.13's SET), or neither.
enum class Opening { kNeedMore, kNative, kTcpStoreV1, kTcpStoreV2, kUnknown };
Opening classifyOpening(std::string_view firstBytes);
inline constexpr std::size_t kValidateBytes = 5;

// Reply pieces.
void putU8(std::string& out, std::uint8_t v);
void putU32(std::string& out, std::uint32_t v);
void putI64(std::string& out, std::int64_t v);
void putString(std::string& out, std::string_view s);

inline constexpr std::uint8_t kReady = 0;         // CHECK
inline constexpr std::uint8_t kNotReady = 1;      // CHECK
inline constexpr std::uint8_t kStopWaiting = 0;   // WAIT
inline constexpr std::uint8_t kWaitCanceled = 1;  // CANCEL_WAIT

}  // namespace ddprun::rendezvous::tcpstore
