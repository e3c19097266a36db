#include "ddprun/rendezvous/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <concepts>
#include <utility>

#include "byte_io.h"

namespace ddprun::rendezvous::protocol {

ParseResult parseFrameHeader(std::string_view input, std::size_t maxFrameBytes,
                             FrameHeader& header) {
  if (input.size() < kHeaderSize) return ParseResult::kNeedMore;
  ByteReader reader(input.substr(0, kHeaderSize));
  reader.u32(header.bodySize);
  reader.u32(header.requestId);
  reader.u8(header.code);
  if (header.bodySize > maxFrameBytes) return ParseResult::kTooLarge;
  if (input.size() - kHeaderSize < header.bodySize) return ParseResult::kNeedMore;
  return ParseResult::kFrame;
}

void appendHeader(std::string& out, std::uint32_t requestId, std::uint8_t code,
                  std::uint32_t bodySize) {
  putU32(out, bodySize);
  putU32(out, requestId);
  putU8(out, code);
}

namespace {

constexpr std::size_t kAnySize = static_cast<std::size_t>(-1);

// Writes the header with a placeholder size, lets `body` append, then
// patches the size in place: one pass, no temporary buffer.
template <typename BodyFn>
void appendFrame(std::string& out, std::uint32_t requestId, std::uint8_t code, BodyFn&& body) {
  const std::size_t start = out.size();
  appendHeader(out, requestId, code, 0);
  body();
  const auto size = static_cast<std::uint32_t>(out.size() - start - kHeaderSize);
  for (std::size_t i = 0; i < 4; ++i) out[start + i] = static_cast<char>((size >> (8 * i)) & 0xFF);
}

// --- the three ways a layout is walked ---------------------------------------
//
// A message's layout is one fields(io, message) function (below); `io` is
// one of these. Every method returns false to stop the walk. key() is a
// store key (the access check sees it); name() is any other string read
// under the same size limit (a rendezvous id, a node id, a client name).

// Appends the fields to a frame body.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  bool u16(std::uint16_t v) { return putU16(out_, v), true; }
  bool u32(std::uint32_t v) { return putU32(out_, v), true; }
  bool i64(std::int64_t v) { return putI64(out_, v), true; }
  bool flag(bool v) { return putU8(out_, v ? 1 : 0), true; }
  bool trailingFlag(bool v) { return flag(v); }
  bool key(std::string_view s) { return putString(out_, s), true; }
  bool name(std::string_view s) { return key(s); }
  bool value(std::string_view s) { return putString(out_, s), true; }
  bool keys(const std::vector<std::string>& list) {
    putU32(out_, static_cast<std::uint32_t>(list.size()));
    for (const auto& s : list) putString(out_, s);
    return true;
  }
  bool values(const std::vector<std::string>& list) { return keys(list); }
  template <typename T, typename Fields>
  bool list(const std::vector<T>& items, Fields&& each) {
    putU32(out_, static_cast<std::uint32_t>(items.size()));
    for (const auto& item : items) each(*this, item);
    return true;
  }
  bool pairs(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
    putU32(out_, static_cast<std::uint32_t>(keys.size()));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      putString(out_, keys[i]);
      putString(out_, values.at(i));
    }
    return true;
  }

 private:
  std::string& out_;
};

// Reads a request body under the Limits, with the first error's status
// and message (a claimed size is checked before anything is sized from it).
class RequestDecoder {
 public:
  RequestDecoder(std::string_view body, const Limits& limits) : reader_(body), limits_(limits) {}

  bool u16(std::uint16_t& v) { return reader_.u16(v); }
  bool u32(std::uint32_t& v) { return reader_.u32(v); }
  bool i64(std::int64_t& v) { return reader_.i64(v); }
  // A flag a later version added at the end of a request: absent (false)
  // when an older client's body ends before it.
  bool trailingFlag(bool& v) {
    std::uint8_t byte = 0;
    if (reader_.atEnd()) return v = false, true;
    if (!reader_.u8(byte)) return false;
    v = byte != 0;
    return true;
  }
  bool key(std::string& s) { return string(s, limits_.maxKeyBytes, "key"); }
  bool name(std::string& s) { return key(s); }
  bool value(std::string& s) { return string(s, limits_.maxValueBytes, "value"); }
  bool keys(std::vector<std::string>& list) {
    std::uint32_t n = 0;
    if (!count(n)) return false;
    list.resize(n);
    for (auto& s : list) {
      if (!key(s)) return false;
    }
    return true;
  }
  bool pairs(std::vector<std::string>& keys, std::vector<std::string>& values) {
    std::uint32_t n = 0;
    if (!count(n)) return false;
    keys.resize(n);
    values.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!key(keys[i]) || !value(values[i])) return false;
    }
    return true;
  }

  // The final verdict: a read that failed without a specific error means the
  // body was truncated; leftover bytes mean it was too long.
  DecodeError finish(bool ok, Op op) {
    if (!error_.ok()) return error_;
    if (!ok) {
      return {Status::kBadRequest, fmt::format("the {} request body is truncated", opName(op))};
    }
    if (!reader_.atEnd()) {
      return {Status::kBadRequest,
              fmt::format("the {} request body has {} unexpected trailing bytes", opName(op),
                          reader_.remaining())};
    }
    return {};
  }

 private:
  bool count(std::uint32_t& n) {
    if (!reader_.u32(n)) return false;
    if (n > limits_.maxKeysPerRequest || n > reader_.remaining() / 4) {
      // Each key takes at least its 4-byte length: a count beyond what the
      // body can hold is refused before any vector is sized from it.
      error_ = n > limits_.maxKeysPerRequest
                   ? DecodeError{Status::kTooLarge,
                                 fmt::format("{} keys in one request is over the limit of {}", n,
                                             limits_.maxKeysPerRequest)}
                   : DecodeError{Status::kBadRequest,
                                 fmt::format("the request body is truncated: it claims {} "
                                             "keys but has room for fewer",
                                             n)};
      return false;
    }
    return true;
  }
  bool string(std::string& out, std::size_t limit, const char* what) {
    bool tooLarge = false;
    if (reader_.string(out, limit, tooLarge)) return true;
    if (tooLarge) {
      error_ = {Status::kTooLarge, fmt::format("a {} is over the limit of {} bytes", what, limit)};
    }
    return false;
  }

  ByteReader reader_;
  const Limits& limits_;
  DecodeError error_;
};

// Measures a request a client is about to send against the Limits that
// RequestDecoder will apply, and sums its body's size.
class LimitChecker {
 public:
  explicit LimitChecker(const Limits& limits) : limits_(limits) {}

  bool u16(std::uint16_t) { return add(2); }
  bool u32(std::uint32_t) { return add(4); }
  bool i64(std::int64_t) { return add(8); }
  bool trailingFlag(bool) { return add(1); }
  bool key(std::string_view s) { return string(s, limits_.maxKeyBytes, "key"); }
  bool name(std::string_view s) { return key(s); }
  bool value(std::string_view s) { return string(s, limits_.maxValueBytes, "value"); }
  bool keys(const std::vector<std::string>& list) {
    if (!count(list.size())) return false;
    for (const auto& s : list) {
      if (!key(s)) return false;
    }
    return true;
  }
  bool pairs(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
    if (keys.size() != values.size()) {
      error_ = {Status::kBadRequest,
                fmt::format("{} keys but {} values", keys.size(), values.size())};
      return false;
    }
    if (!count(keys.size())) return false;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!key(keys[i]) || !value(values[i])) return false;
    }
    return true;
  }

  DecodeError finish(Op op) {
    if (error_.ok() && bytes_ > limits_.maxFrameBytes) {
      error_ = {Status::kTooLarge,
                fmt::format("a {} request of {} bytes is over the frame limit of {} bytes; "
                            "split it",
                            opName(op), bytes_, limits_.maxFrameBytes)};
    }
    return error_;
  }

 private:
  bool add(std::size_t n) {
    bytes_ += n;
    return true;
  }
  bool count(std::size_t n) {
    if (n <= limits_.maxKeysPerRequest) return add(4);
    error_ = {Status::kTooLarge, fmt::format("{} keys in one request is over the limit of {}", n,
                                             limits_.maxKeysPerRequest)};
    return false;
  }
  bool string(std::string_view s, std::size_t limit, const char* what) {
    if (s.size() <= limit) return add(4 + s.size());
    error_ = {Status::kTooLarge,
              fmt::format("a {} of {} bytes is over the limit of {} bytes", what, s.size(), limit)};
    return false;
  }

  const Limits& limits_;
  std::size_t bytes_ = 0;
  DecodeError error_;
};

// Sees only a request's store keys (allStoreKeys).
class KeyVisitor {
 public:
  explicit KeyVisitor(const std::function<bool(std::string_view)>& allowed) : allowed_(allowed) {}

  bool u16(std::uint16_t) { return true; }
  bool u32(std::uint32_t) { return true; }
  bool i64(std::int64_t) { return true; }
  bool trailingFlag(bool) { return true; }
  bool key(std::string_view s) { return allowed_(s); }
  bool name(std::string_view) { return true; }  // ids and names, not store keys
  bool value(std::string_view) { return true; }
  bool keys(const std::vector<std::string>& list) {
    return std::all_of(list.begin(), list.end(), allowed_);
  }
  bool pairs(const std::vector<std::string>& keys, const std::vector<std::string>&) {
    return this->keys(keys);
  }

 private:
  const std::function<bool(std::string_view)>& allowed_;
};

// Reads an OK reply body: the server's bytes, bounded only by their size.
class ReplyReader {
 public:
  explicit ReplyReader(std::string_view body) : in_(body) {}

  bool u16(std::uint16_t& v) { return in_.u16(v); }
  bool u32(std::uint32_t& v) { return in_.u32(v); }
  bool i64(std::int64_t& v) { return in_.i64(v); }
  bool flag(bool& v) {
    std::uint8_t byte = 0;
    if (!in_.u8(byte)) return false;
    v = byte != 0;
    return true;
  }
  bool key(std::string& s) { return in_.string(s, kAnySize, tooLarge_); }
  bool value(std::string& s) { return key(s); }
  bool keys(std::vector<std::string>& list) {
    // A count the rest of the body can hold (each element takes 4 bytes or
    // more), so nothing is sized from a claim.
    std::uint32_t n = 0;
    if (!in_.u32(n) || n > in_.remaining() / 4) return false;
    list.resize(n);
    for (auto& s : list) {
      if (!key(s)) return false;
    }
    return true;
  }
  bool values(std::vector<std::string>& list) { return keys(list); }
  // A list of structs, each at least 4 bytes on the wire.
  template <typename T, typename Fields>
  bool list(std::vector<T>& items, Fields&& each) {
    std::uint32_t n = 0;
    if (!in_.u32(n) || n > in_.remaining() / 4) return false;
    items.resize(n);
    for (auto& item : items) {
      if (!each(*this, item)) return false;
    }
    return true;
  }
  bool atEnd() const { return in_.atEnd(); }

 private:
  ByteReader in_;
  bool tooLarge_ = false;
};

// --- each message's layout ----------------------------------------------------
//
// docs/protocol.md §5 and §10b in code: for every op, its request's fields
// and its OK reply's fields, in wire order. Error replies (every status but
// OK) are `str message` for all ops; CLOSED adds the job's outcome.

template <typename T, typename... Ms>
concept OneOf = (std::same_as<std::remove_const_t<T>, Ms> || ...);

// Replies shared by several ops.
bool fields(auto&, OneOf<EmptyReply> auto&) { return true; }
bool fields(auto& io, OneOf<ValueReply> auto& r) { return io.value(r.value); }
bool fields(auto& io, OneOf<IntegerReply> auto& r) { return io.i64(r.value); }
bool fields(auto& io, OneOf<FlagReply> auto& r) { return io.flag(r.value); }

// HELLO: u16 version, str token, str client_name -> u16 version, str server_name.
// The token is read under the value limit and the name under the key limit;
// before authentication the 64 KiB frame limit bounds both.
bool fields(auto& io, OneOf<Hello> auto& m) {
  return io.u16(m.version) && io.value(m.token) && io.name(m.clientName);
}
bool fields(auto& io, OneOf<HelloReply> auto& r) {
  return io.u16(r.version) && io.value(r.serverName);
}

// SET, APPEND: str key, str value -> (empty)
bool fields(auto& io, OneOf<Set, Append> auto& m) { return io.key(m.key) && io.value(m.value); }

// GET: str key, u32 timeout_ms -> str value
bool fields(auto& io, OneOf<Get> auto& m) { return io.key(m.key) && io.u32(m.timeoutMs); }

// ADD: str key, i64 delta -> i64 result
bool fields(auto& io, OneOf<Add> auto& m) { return io.key(m.key) && io.i64(m.delta); }

// COMPARE_SET: str key, str expected, str desired -> str value now
bool fields(auto& io, OneOf<CompareSet> auto& m) {
  return io.key(m.key) && io.value(m.expected) && io.value(m.desired);
}

// CHECK: keys -> u8 all present
bool fields(auto& io, OneOf<Check> auto& m) { return io.keys(m.keys); }

// WAIT: u32 timeout_ms, keys -> (empty)
// MULTI_GET: u32 timeout_ms, keys -> u32 n, n x str value
bool fields(auto& io, OneOf<Wait, MultiGet> auto& m) {
  return io.u32(m.timeoutMs) && io.keys(m.keys);
}
bool fields(auto& io, OneOf<ValuesReply> auto& r) { return io.values(r.values); }

// DELETE_KEY: str key -> u8 existed
bool fields(auto& io, OneOf<DeleteKey> auto& m) { return io.key(m.key); }

// NUM_KEYS: (empty) -> i64 count
bool fields(auto&, OneOf<NumKeys> auto&) { return true; }

// MULTI_SET: u32 n, n x (str key, str value) -> (empty)
bool fields(auto& io, OneOf<MultiSet> auto& m) { return io.pairs(m.keys, m.values); }

// PING: str payload -> the payload
bool fields(auto& io, OneOf<Ping> auto& m) { return io.value(m.payload); }

// QUEUE_PUSH: str key, str value -> (empty)
bool fields(auto& io, OneOf<QueuePush> auto& m) { return io.key(m.key) && io.value(m.value); }
// QUEUE_POP: str key -> i64 length before, str value
// QUEUE_LEN: str key -> i64 length
bool fields(auto& io, OneOf<QueuePop, QueueLen> auto& m) { return io.key(m.key); }
bool fields(auto& io, OneOf<QueuePopReply> auto& r) {
  return io.i64(r.length) && io.value(r.value);
}
// LIST_KEYS: (empty) -> u32 n, n x str key
bool fields(auto&, OneOf<ListKeys> auto&) { return true; }
// BARRIER: str key, i64 world_size, u32 timeout_ms -> (empty)
bool fields(auto& io, OneOf<Barrier> auto& m) {
  return io.key(m.key) && io.i64(m.worldSize) && io.u32(m.timeoutMs);
}
// SHARED_WAIT: u32 timeout_ms, keys -> u8 every key present as a key
bool fields(auto& io, OneOf<SharedWait> auto& m) { return io.u32(m.timeoutMs) && io.keys(m.keys); }
// CANCEL: u32 request_id -> u8 it was pending
bool fields(auto& io, OneOf<Cancel> auto& m) { return io.u32(m.requestId); }

// JOIN: the JoinRequest -> the Assignment
bool fields(auto& io, OneOf<JoinRequest> auto& j) {
  return io.name(j.rdzvId) && io.name(j.nodeId) && io.i64(j.nodeRank) && io.u32(j.localWorldSize) &&
         io.u32(j.minNodes) && io.u32(j.maxNodes) && io.u32(j.lastCallMs) &&
         io.u32(j.keepAliveMs) && io.u32(j.timeoutMs) && io.name(j.address) &&
         io.u32(j.masterPort) && io.i64(j.maxRestarts) && io.u32(j.maxNodeFailures) &&
         io.u32(j.nodeCooldownMs) && io.u32(j.fixedNodes);
}
bool fields(auto& io, OneOf<Assignment> auto& a) {
  return io.i64(a.round) && io.u32(a.groupRank) && io.u32(a.groupWorldSize) &&
         io.u32(a.rankOffset) && io.u32(a.worldSize) && io.i64(a.restarts) &&
         io.value(a.masterAddr) && io.u32(a.masterPort);
}

// LEAVE: the NodeReport -> (empty)
// REPORT_FAILURE: the NodeReport -> i64 restarts used, u8 restart allowed
// (version 7 adds u8 give_up at the end, version 8 u8 lost_a_peer after it;
// an older body ends before them)
bool fields(auto& io, OneOf<Leave, ReportFailure> auto& m) {
  auto& n = m.node;
  return io.name(n.rdzvId) && io.name(n.nodeId) && io.i64(n.round) && io.i64(n.maxRestarts) &&
         io.i64(n.exitCode) && io.value(n.report) && io.i64(n.failedAtMs) &&
         io.trailingFlag(n.giveUp) && io.trailingFlag(n.lostAPeer);
}
bool fields(auto& io, OneOf<RestartDecision> auto& r) {
  return io.i64(r.restarts) && io.flag(r.restartAllowed);
}

// RENDEZVOUS_STATUS: str rdzv_id, u32 details -> the RendezvousStatus
bool fields(auto& io, OneOf<RendezvousStatusQuery> auto& m) {
  return io.name(m.rdzvId) && io.u32(m.details);
}
bool fields(auto& io, OneOf<RendezvousMember> auto& m) {
  return io.value(m.nodeId) && io.value(m.address) && io.i64(m.groupRank) &&
         io.u32(m.localWorldSize);
}
bool fields(auto& io, OneOf<FailureSummary> auto& f) {
  return io.value(f.nodeId) && io.i64(f.round) && io.i64(f.exitCode) && io.i64(f.failedAtMs) &&
         io.value(f.report);
}
bool fields(auto& io, OneOf<RendezvousStatus> auto& st) {
  return io.flag(st.exists) && io.i64(st.round) && io.flag(st.running) && io.u32(st.joined) &&
         io.u32(st.minNodes) && io.u32(st.maxNodes) && io.i64(st.lastCallMs) &&
         io.u32(st.missingCount) && io.keys(st.missing) && st.missing.size() <= kMaxMissingShown &&
         io.flag(st.closed) && io.i64(st.restarts) && io.i64(st.maxRestarts) &&
         io.list(st.members, [](auto& x, auto& m) { return fields(x, m); }) &&
         fields(io, st.lastFailure);
}

// Alternative I of Request is the message of op I + 1.
template <std::size_t... I>
constexpr bool opsMatchAlternatives(std::index_sequence<I...>) {
  return ((std::variant_alternative_t<I, Request>::kOp == static_cast<Op>(I + 1)) && ...);
}
constexpr auto kAlternatives = std::make_index_sequence<std::variant_size_v<Request>>{};
static_assert(opsMatchAlternatives(kAlternatives));
static_assert(std::variant_size_v<Request> == static_cast<std::size_t>(Op::kCancel));

// decodeRequest's dispatch: reads alternative I in place.
using AlternativeReader = bool (*)(RequestDecoder&, Request&);
template <std::size_t I>
bool readAlternative(RequestDecoder& d, Request& r) {
  return fields(d, r.emplace<I>());
}
template <std::size_t... I>
constexpr std::array<AlternativeReader, sizeof...(I)> alternativeReaders(
    std::index_sequence<I...>) {
  return {&readAlternative<I>...};
}
constexpr auto kReaders = alternativeReaders(kAlternatives);

template <typename Body>
void writeReply(std::string& out, std::uint32_t requestId, const Body& reply) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(Status::kOk), [&] {
    Writer w(out);
    fields(w, reply);
  });
}

template <typename Body>
bool readReply(std::string_view body, Body& reply) {
  reply = Body{};
  ReplyReader in(body);
  return fields(in, reply) && in.atEnd();
}

}  // namespace

void encodeRequest(std::string& out, std::uint32_t requestId, const Request& request) {
  std::visit(
      [&](const auto& message) {
        appendFrame(out, requestId, static_cast<std::uint8_t>(message.kOp), [&] {
          Writer w(out);
          fields(w, message);
        });
      },
      request);
}

DecodeError decodeRequest(std::uint8_t code, std::string_view body, const Limits& limits,
                          Request& request) {
  if (!isKnownOp(code)) {
    return {Status::kBadRequest, fmt::format("unknown operation code {}", code)};
  }
  RequestDecoder d(body, limits);
  const bool ok = kReaders[code - 1](d, request);
  return d.finish(ok, static_cast<Op>(code));
}

DecodeError checkRequest(const Request& request, const Limits& limits) {
  LimitChecker checker(limits);
  std::visit([&](const auto& message) { fields(checker, message); }, request);
  return checker.finish(opOf(request));
}

bool allStoreKeys(const Request& request, const std::function<bool(std::string_view)>& allowed) {
  KeyVisitor visitor(allowed);
  return std::visit([&](const auto& message) { return fields(visitor, message); }, request);
}

void encodeReply(std::string& out, std::uint32_t id, const EmptyReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const ValueReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const ValuesReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const IntegerReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const FlagReply& r) { writeReply(out, id, r); }
void encodeReply(std::string& out, std::uint32_t id, const QueuePopReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const HelloReply& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const Assignment& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const RestartDecision& r) {
  writeReply(out, id, r);
}
void encodeReply(std::string& out, std::uint32_t id, const RendezvousStatus& r) {
  writeReply(out, id, r);
}

bool decodeReply(std::string_view body, EmptyReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, ValueReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, ValuesReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, IntegerReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, FlagReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, QueuePopReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, HelloReply& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, Assignment& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, RestartDecision& r) { return readReply(body, r); }
bool decodeReply(std::string_view body, RendezvousStatus& r) { return readReply(body, r); }

// Errors: str message; CLOSED: str message, i64 exit_code, str report.
void encodeError(std::string& out, std::uint32_t requestId, Status status,
                 std::string_view message) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(status), [&] { putString(out, message); });
}

void encodeClosed(std::string& out, std::uint32_t requestId, std::string_view message,
                  const JobFailure& failure) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(Status::kClosed), [&] {
    putString(out, message);
    putI64(out, failure.exitCode);
    putString(out, failure.report);
  });
}

bool decodeError(std::uint8_t code, std::string_view body, ErrorReply& reply) {
  reply = ErrorReply{};
  if (code == static_cast<std::uint8_t>(Status::kOk) ||
      code == static_cast<std::uint8_t>(Status::kEvent) ||
      code > static_cast<std::uint8_t>(Status::kExcluded)) {
    return false;
  }
  reply.status = static_cast<Status>(code);
  ReplyReader in(body);
  bool ok = in.value(reply.message);
  if (ok && reply.status == Status::kClosed) {
    ok = in.i64(reply.failure.exitCode) && in.value(reply.failure.report);
  }
  return ok && in.atEnd();
}

// Events: u8 type, str rdzv_id, i64 round, i64 exit_code, str message.
void encodeEvent(std::string& out, const Event& e) {
  appendFrame(out, 0, static_cast<std::uint8_t>(Status::kEvent), [&] {
    putU8(out, static_cast<std::uint8_t>(e.type));
    putString(out, e.rdzvId);
    putI64(out, e.round);
    putI64(out, e.exitCode);
    putString(out, e.message);
  });
}

bool decodeEvent(std::string_view body, Event& e) {
  ByteReader in(body);
  bool tooLarge = false;
  std::uint8_t type = 0;
  const bool ok = in.u8(type) && in.string(e.rdzvId, kAnySize, tooLarge) && in.i64(e.round) &&
                  in.i64(e.exitCode) && in.string(e.message, kAnySize, tooLarge) && in.atEnd();
  if (!ok || type < 1 || type > 4) return false;
  e.type = static_cast<EventType>(type);
  return true;
}

}  // namespace ddprun::rendezvous::protocol
