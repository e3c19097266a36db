// tcpstore_decoder_fuzz: libFuzzer target for the resumable TCPStore request
// decoder (rendezvous/wire/src/tcpstore_codec.cc).
//
// The first input byte picks the dialect (bit 0), the chunk size (bits 1-4,
// 1 to 16 bytes) and the limits (bit 5: tiny or default); the rest is the
// byte stream a store server receives from a PyTorch client. The stream is
// decoded twice, whole and in chunks, keeping what the decoder did not
// consume as a session's input buffer does. Besides the sanitizers, it
// checks these properties and aborts on a violation:
//   - both ways yield the same requests and end the same way (error or
//     waiting for more);
//   - `consumed` never exceeds the input;
//   - the input never has to keep more than one partial field: at most a
//     length prefix and a field no larger than the limits allow;
//   - heldBytes() stays within maxRequestBytes;
//   - every decoded field respects its limit, counts included.
//
// Thread-safety: libFuzzer calls it from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/tcpstore_codec.h"

namespace {

namespace tcpstore = ddprun::rendezvous::tcpstore;
using tcpstore::Decoder;
using tcpstore::DecoderLimits;
using tcpstore::Parse;
using tcpstore::Request;

constexpr DecoderLimits kTiny{
    .maxKeyBytes = 8, .maxValueBytes = 16, .maxKeysPerRequest = 3, .maxRequestBytes = 160};
constexpr DecoderLimits kDefault{};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "tcpstore_decoder_fuzz: property violated: %s\n", what);
  std::abort();
}

struct Outcome {
  std::vector<Request> requests;
  Parse last = Parse::kNeedMore;
};

Outcome decode(std::string_view bytes, std::size_t chunk, tcpstore::Dialect dialect,
               const DecoderLimits& limits) {
  Decoder decoder(dialect, limits);
  Outcome out;
  std::string input;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    input.append(bytes.substr(at, chunk));
    for (;;) {
      Request r;
      std::size_t used = 0;
      std::string error;
      out.last = decoder.feed(input, used, r, error);
      if (used > input.size()) fail("consumed more than the input");
      input.erase(0, used);
      if (decoder.heldBytes() > limits.maxRequestBytes) fail("held bytes over the limit");
      if (out.last == Parse::kError) {
        if (error.empty()) fail("an error without a message");
        return out;
      }
      if (out.last == Parse::kNeedMore) {
        // Waiting for more: what is left is one partial field at most.
        if (input.size() > 8 + std::max(limits.maxKeyBytes, limits.maxValueBytes)) {
          fail("the input keeps more than one partial field");
        }
        break;
      }
      if (r.keys.size() > limits.maxKeysPerRequest) fail("too many keys accepted");
      for (const auto& k : r.keys) {
        if (k.size() > limits.maxKeyBytes) fail("a key over the limit accepted");
      }
      for (const auto& v : r.values) {
        if (v.size() > limits.maxValueBytes) fail("a value over the limit accepted");
      }
      out.requests.push_back(std::move(r));
    }
  }
  return out;
}

bool same(const Request& a, const Request& b) {
  return a.op == b.op && a.keys == b.keys && a.values == b.values && a.delta == b.delta &&
         a.word == b.word;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t control = data[0];
  const auto dialect = (control & 1) ? tcpstore::Dialect::kV1 : tcpstore::Dialect::kV2;
  const std::size_t chunk = 1 + ((control >> 1) & 0x0F);
  const DecoderLimits& limits = (control & 0x20) ? kTiny : kDefault;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (bytes.empty()) return 0;
  const Outcome whole = decode(bytes, bytes.size(), dialect, limits);
  const Outcome pieces = decode(bytes, chunk, dialect, limits);
  if (whole.last != pieces.last) fail("whole and chunked input end differently");
  if (whole.requests.size() != pieces.requests.size()) fail("different numbers of requests");
  for (std::size_t i = 0; i < whole.requests.size(); ++i) {
    if (!same(whole.requests[i], pieces.requests[i])) fail("different requests");
  }
  return 0;
}
