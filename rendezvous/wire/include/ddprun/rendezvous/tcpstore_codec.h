// The PyTorch TCPStore wire protocol, server side: decoding requests and
// encoding replies of the 1.13/2.0 dialect (no handshake) and the 2.2+
// dialect (VALIDATE first, PING in 2.5+). Pure functions on bytes; see
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
  kListKeys,
};

inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

struct Request {
  Op op = Op::kSet;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t delta = 0;
  std::uint32_t word = 0;  // VALIDATE magic or PING nonce
};

enum class Parse { kNeedMore, kRequest, kError };

// Decodes one request from the front of `input`; on kRequest `consumed`
// bytes belong to it. On kError, `error` says why (unknown opcode, a size
// over `maxBytes`); the connection must then be closed.
Parse decode(std::string_view input, Dialect dialect, std::size_t maxBytes, Request& request,
             std::size_t& consumed, std::string& error);

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
