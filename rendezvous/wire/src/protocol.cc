#include "ddprun/rendezvous/protocol.h"

#include <fmt/format.h>

#include "byte_io.h"

namespace ddprun::rendezvous::protocol {

const char* opName(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kNumKeys:
      return "NUM_KEYS";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kAppend:
      return "APPEND";
    case Op::kPing:
      return "PING";
    case Op::kJoin:
      return "JOIN";
    case Op::kLeave:
      return "LEAVE";
    case Op::kReportFailure:
      return "REPORT_FAILURE";
    case Op::kRendezvousStatus:
      return "RENDEZVOUS_STATUS";
  }
  return "UNKNOWN";
}

const char* statusName(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kTimeout:
      return "timeout";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kBadRequest:
      return "bad request";
    case Status::kTooLarge:
      return "too large";
    case Status::kUnsupportedVersion:
      return "unsupported protocol version";
    case Status::kNotInteger:
      return "not an integer";
    case Status::kStoreFull:
      return "store full";
    case Status::kGoodbye:
      return "goodbye";
    case Status::kEvent:
      return "event";
    case Status::kClosed:
      return "rendezvous closed";
  }
  return "unknown status";
}

bool isKnownOp(std::uint8_t code) {
  return code >= static_cast<std::uint8_t>(Op::kHello) &&
         code <= static_cast<std::uint8_t>(Op::kRendezvousStatus);
}

std::string missingNodesText(const RendezvousStatus& status) {
  if (status.missingCount == 0) return "";
  std::string text = "; missing: ";
  for (std::size_t i = 0; i < status.missing.size(); ++i) {
    if (i > 0) text += ", ";
    text += status.missing[i];
  }
  if (status.missingCount > status.missing.size()) {
    text += fmt::format(" and {} more", status.missingCount - status.missing.size());
  }
  return text;
}

std::uint32_t toTimeoutMs(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return 0;
  if (timeout.count() >= static_cast<std::int64_t>(kNoTimeout)) return kNoTimeout;
  return static_cast<std::uint32_t>(timeout.count());
}

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

void putKeyList(std::string& out, const std::vector<std::string>& keys) {
  putU32(out, static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) putString(out, key);
}

// Decodes one op's body; shares the error bookkeeping of all ops.
class RequestDecoder {
 public:
  RequestDecoder(std::string_view body, const Limits& limits) : reader_(body), limits_(limits) {}

  bool key(std::vector<std::string>& keys) { return string(keys, limits_.maxKeyBytes, "key"); }
  bool value(std::vector<std::string>& values) {
    return string(values, limits_.maxValueBytes, "value");
  }
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
  bool keys(std::vector<std::string>& keys) {
    std::uint32_t n = 0;
    if (!count(n)) return false;
    keys.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!key(keys)) return false;
    }
    return true;
  }
  ByteReader& reader() { return reader_; }

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
  bool string(std::vector<std::string>& out, std::size_t limit, const char* what) {
    bool tooLarge = false;
    std::string s;
    if (!reader_.string(s, limit, tooLarge)) {
      if (tooLarge) {
        error_ = {Status::kTooLarge,
                  fmt::format("a {} is over the limit of {} bytes", what, limit)};
      }
      return false;
    }
    out.push_back(std::move(s));
    return true;
  }

  ByteReader reader_;
  const Limits& limits_;
  DecodeError error_;
};

}  // namespace

// --- each op's layout -------------------------------------------------------
//
// docs/protocol.md §5 and §10b in code: for every op, how its request body
// is written and read and how its OK reply body is written and read, side
// by side. Error replies (every status but OK) are `str message` for all
// ops; CLOSED adds the job's outcome (encodeClosed).

namespace {

constexpr std::size_t kAnySize = static_cast<std::size_t>(-1);

// Reads an OK reply body: the server's bytes, bounded only by their size.
struct ReplyReader {
  ByteReader in;
  bool tooLarge = false;

  bool string(std::string& out) { return in.string(out, kAnySize, tooLarge); }
  bool strings(std::vector<std::string>& out, std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      std::string value;
      if (!string(value)) return false;
      out.push_back(std::move(value));
    }
    return true;
  }
  bool flag(bool& out) {
    std::uint8_t byte = 0;
    if (!in.u8(byte)) return false;
    out = byte != 0;
    return true;
  }
  // A count the rest of the body can hold (each element takes 4 bytes or
  // more), so nothing is sized from a claim.
  bool count(std::uint32_t& n) { return in.u32(n) && n <= in.remaining() / 4; }
};

struct OpLayout {
  void (*writeRequest)(std::string& out, const Request& r);
  bool (*readRequest)(RequestDecoder& d, ByteReader& in, Request& r);
  void (*writeReply)(std::string& out, const Reply& r);
  bool (*readReply)(ReplyReader& in, Reply& r);
};

// Shared pieces.
void writeNoRequest(std::string&, const Request&) {}
bool readNoRequest(RequestDecoder&, ByteReader&, Request&) { return true; }
void writeKeyRequest(std::string& out, const Request& r) { putString(out, r.keys.at(0)); }
bool readKeyRequest(RequestDecoder& d, ByteReader&, Request& r) { return d.key(r.keys); }
void writeKeyValueRequest(std::string& out, const Request& r) {
  putString(out, r.keys.at(0));
  putString(out, r.values.at(0));
}
bool readKeyValueRequest(RequestDecoder& d, ByteReader&, Request& r) {
  return d.key(r.keys) && d.value(r.values);
}
void writeTimedKeysRequest(std::string& out, const Request& r) {
  putU32(out, r.timeoutMs);
  putKeyList(out, r.keys);
}
bool readTimedKeysRequest(RequestDecoder& d, ByteReader& in, Request& r) {
  return in.u32(r.timeoutMs) && d.keys(r.keys);
}
void writeNodeReport(std::string& out, const Request& r) {
  const NodeReport& n = r.node;
  putString(out, n.rdzvId);
  putString(out, n.nodeId);
  putI64(out, n.round);
  putI64(out, n.maxRestarts);
  putI64(out, n.exitCode);
  putString(out, n.report);
}
bool readNodeReport(RequestDecoder& d, ByteReader& in, Request& r) {
  NodeReport& n = r.node;
  std::vector<std::string> strings;
  const bool ok = d.key(strings) && d.key(strings) && in.i64(n.round) && in.i64(n.maxRestarts) &&
                  in.i64(n.exitCode) && d.value(strings);
  if (ok) {
    n.rdzvId = std::move(strings[0]);
    n.nodeId = std::move(strings[1]);
    n.report = std::move(strings[2]);
  }
  return ok;
}
void writeNoReply(std::string&, const Reply&) {}
bool readNoReply(ReplyReader&, Reply&) { return true; }
void writeValueReply(std::string& out, const Reply& r) { putString(out, r.values.at(0)); }
bool readValueReply(ReplyReader& in, Reply& r) { return in.strings(r.values, 1); }
void writeIntegerReply(std::string& out, const Reply& r) { putI64(out, r.integer); }
bool readIntegerReply(ReplyReader& in, Reply& r) { return in.in.i64(r.integer); }
void writeFlagReply(std::string& out, const Reply& r) { putU8(out, r.flag ? 1 : 0); }
bool readFlagReply(ReplyReader& in, Reply& r) { return in.flag(r.flag); }

// HELLO: u16 version, str token, str client_name -> u16 version, str server_name.
// The token is read under the value limit and the name under the key limit;
// before authentication the 64 KiB frame limit bounds both.
constexpr OpLayout kHelloLayout{
    [](std::string& out, const Request& r) {
      putU16(out, r.version);
      putString(out, r.values.empty() ? std::string_view() : r.values[0]);
      putString(out, r.keys.empty() ? std::string_view() : r.keys[0]);
    },
    [](RequestDecoder& d, ByteReader& in, Request& r) {
      return in.u16(r.version) && d.value(r.values) && d.key(r.keys);
    },
    [](std::string& out, const Reply& r) {
      putU16(out, r.version);
      putString(out, r.values.empty() ? std::string_view() : r.values[0]);
    },
    [](ReplyReader& in, Reply& r) { return in.in.u16(r.version) && in.strings(r.values, 1); }};

// SET, APPEND: str key, str value -> (empty)
constexpr OpLayout kSetLayout{writeKeyValueRequest, readKeyValueRequest, writeNoReply, readNoReply};

// GET: str key, u32 timeout_ms -> str value
constexpr OpLayout kGetLayout{[](std::string& out, const Request& r) {
                                putString(out, r.keys.at(0));
                                putU32(out, r.timeoutMs);
                              },
                              [](RequestDecoder& d, ByteReader& in, Request& r) {
                                return d.key(r.keys) && in.u32(r.timeoutMs);
                              },
                              writeValueReply, readValueReply};

// ADD: str key, i64 delta -> i64 result
constexpr OpLayout kAddLayout{
    [](std::string& out, const Request& r) {
      putString(out, r.keys.at(0));
      putI64(out, r.delta);
    },
    [](RequestDecoder& d, ByteReader& in, Request& r) { return d.key(r.keys) && in.i64(r.delta); },
    writeIntegerReply, readIntegerReply};

// COMPARE_SET: str key, str expected, str desired -> str value now
constexpr OpLayout kCompareSetLayout{[](std::string& out, const Request& r) {
                                       putString(out, r.keys.at(0));
                                       putString(out, r.values.at(0));
                                       putString(out, r.values.at(1));
                                     },
                                     [](RequestDecoder& d, ByteReader&, Request& r) {
                                       return d.key(r.keys) && d.value(r.values) &&
                                              d.value(r.values);
                                     },
                                     writeValueReply, readValueReply};

// CHECK: keys -> u8 all present
constexpr OpLayout kCheckLayout{
    [](std::string& out, const Request& r) { putKeyList(out, r.keys); },
    [](RequestDecoder& d, ByteReader&, Request& r) { return d.keys(r.keys); }, writeFlagReply,
    readFlagReply};

// WAIT: u32 timeout_ms, keys -> (empty)
constexpr OpLayout kWaitLayout{writeTimedKeysRequest, readTimedKeysRequest, writeNoReply,
                               readNoReply};

// MULTI_GET: u32 timeout_ms, keys -> values
constexpr OpLayout kMultiGetLayout{writeTimedKeysRequest, readTimedKeysRequest,
                                   [](std::string& out, const Reply& r) {
                                     putU32(out, static_cast<std::uint32_t>(r.values.size()));
                                     for (const auto& v : r.values) putString(out, v);
                                   },
                                   [](ReplyReader& in, Reply& r) {
                                     std::uint32_t n = 0;
                                     return in.count(n) && in.strings(r.values, n);
                                   }};

// DELETE_KEY: str key -> u8 existed
constexpr OpLayout kDeleteKeyLayout{writeKeyRequest, readKeyRequest, writeFlagReply, readFlagReply};

// NUM_KEYS: (empty) -> i64 count
constexpr OpLayout kNumKeysLayout{writeNoRequest, readNoRequest, writeIntegerReply,
                                  readIntegerReply};

// MULTI_SET: u32 n, n x (str key, str value) -> (empty)
constexpr OpLayout kMultiSetLayout{[](std::string& out, const Request& r) {
                                     putU32(out, static_cast<std::uint32_t>(r.keys.size()));
                                     for (std::size_t i = 0; i < r.keys.size(); ++i) {
                                       putString(out, r.keys[i]);
                                       putString(out, r.values.at(i));
                                     }
                                   },
                                   [](RequestDecoder& d, ByteReader&, Request& r) {
                                     std::uint32_t n = 0;
                                     bool ok = d.count(n);
                                     for (std::uint32_t i = 0; ok && i < n; ++i)
                                       ok = d.key(r.keys) && d.value(r.values);
                                     return ok;
                                   },
                                   writeNoReply, readNoReply};

// PING: str payload -> the payload
constexpr OpLayout kPingLayout{
    [](std::string& out, const Request& r) {
      putString(out, r.values.empty() ? std::string_view() : r.values[0]);
    },
    [](RequestDecoder& d, ByteReader&, Request& r) { return d.value(r.values); }, writeValueReply,
    readValueReply};

// JOIN: the JoinRequest (and the wait's timeout) -> the Assignment
constexpr OpLayout kJoinLayout{
    [](std::string& out, const Request& r) {
      const JoinRequest& j = r.join;
      putString(out, j.rdzvId);
      putString(out, j.nodeId);
      putI64(out, j.nodeRank);
      putU32(out, j.localWorldSize);
      putU32(out, j.minNodes);
      putU32(out, j.maxNodes);
      putU32(out, j.lastCallMs);
      putU32(out, j.keepAliveMs);
      putU32(out, r.timeoutMs);
      putString(out, j.address);
      putU32(out, j.masterPort);
      putI64(out, j.maxRestarts);
    },
    [](RequestDecoder& d, ByteReader& in, Request& r) {
      JoinRequest& j = r.join;
      std::vector<std::string> strings;
      const bool ok = d.key(strings) && d.key(strings) && in.i64(j.nodeRank) &&
                      in.u32(j.localWorldSize) && in.u32(j.minNodes) && in.u32(j.maxNodes) &&
                      in.u32(j.lastCallMs) && in.u32(j.keepAliveMs) && in.u32(r.timeoutMs) &&
                      d.key(strings) && in.u32(j.masterPort) && in.i64(j.maxRestarts);
      if (ok) {
        j.rdzvId = std::move(strings[0]);
        j.nodeId = std::move(strings[1]);
        j.address = std::move(strings[2]);
      }
      return ok;
    },
    [](std::string& out, const Reply& r) {
      const Assignment& a = r.assignment;
      putI64(out, a.round);
      putU32(out, a.groupRank);
      putU32(out, a.groupWorldSize);
      putU32(out, a.rankOffset);
      putU32(out, a.worldSize);
      putI64(out, a.restarts);
      putString(out, a.masterAddr);
      putU32(out, a.masterPort);
    },
    [](ReplyReader& in, Reply& r) {
      Assignment& a = r.assignment;
      return in.in.i64(a.round) && in.in.u32(a.groupRank) && in.in.u32(a.groupWorldSize) &&
             in.in.u32(a.rankOffset) && in.in.u32(a.worldSize) && in.in.i64(a.restarts) &&
             in.string(a.masterAddr) && in.in.u32(a.masterPort);
    }};

// LEAVE: the NodeReport -> (empty)
constexpr OpLayout kLeaveLayout{writeNodeReport, readNodeReport, writeNoReply, readNoReply};

// REPORT_FAILURE: the NodeReport -> i64 restarts used, u8 restart allowed
constexpr OpLayout kReportFailureLayout{
    writeNodeReport, readNodeReport,
    [](std::string& out, const Reply& r) {
      putI64(out, r.integer);
      putU8(out, r.flag ? 1 : 0);
    },
    [](ReplyReader& in, Reply& r) { return in.in.i64(r.integer) && in.flag(r.flag); }};

// RENDEZVOUS_STATUS: str rdzv_id -> the RendezvousStatus
constexpr OpLayout kRendezvousStatusLayout{
    [](std::string& out, const Request& r) { putString(out, r.rdzvId); },
    [](RequestDecoder& d, ByteReader&, Request& r) {
      std::vector<std::string> strings;
      const bool ok = d.key(strings);
      if (ok) r.rdzvId = std::move(strings[0]);
      return ok;
    },
    [](std::string& out, const Reply& r) {
      const RendezvousStatus& st = r.rendezvous;
      putU8(out, st.exists ? 1 : 0);
      putI64(out, st.round);
      putU8(out, st.running ? 1 : 0);
      putU32(out, st.joined);
      putU32(out, st.minNodes);
      putU32(out, st.maxNodes);
      putI64(out, st.lastCallMs);
      putU32(out, st.missingCount);
      putKeyList(out, st.missing);
    },
    [](ReplyReader& in, Reply& r) {
      RendezvousStatus& st = r.rendezvous;
      std::uint32_t n = 0;
      return in.flag(st.exists) && in.in.i64(st.round) && in.flag(st.running) &&
             in.in.u32(st.joined) && in.in.u32(st.minNodes) && in.in.u32(st.maxNodes) &&
             in.in.i64(st.lastCallMs) && in.in.u32(st.missingCount) && in.count(n) &&
             n <= kMaxMissingShown && in.strings(st.missing, n);
    }};

const OpLayout& layoutOf(Op op) {
  switch (op) {
    case Op::kHello:
      return kHelloLayout;
    case Op::kSet:
    case Op::kAppend:
      return kSetLayout;
    case Op::kGet:
      return kGetLayout;
    case Op::kAdd:
      return kAddLayout;
    case Op::kCompareSet:
      return kCompareSetLayout;
    case Op::kCheck:
      return kCheckLayout;
    case Op::kWait:
      return kWaitLayout;
    case Op::kDeleteKey:
      return kDeleteKeyLayout;
    case Op::kNumKeys:
      return kNumKeysLayout;
    case Op::kMultiGet:
      return kMultiGetLayout;
    case Op::kMultiSet:
      return kMultiSetLayout;
    case Op::kPing:
      return kPingLayout;
    case Op::kJoin:
      return kJoinLayout;
    case Op::kLeave:
      return kLeaveLayout;
    case Op::kReportFailure:
      return kReportFailureLayout;
    case Op::kRendezvousStatus:
      return kRendezvousStatusLayout;
  }
  return kNumKeysLayout;  // unreachable: callers pass known ops
}

}  // namespace

void encodeRequest(std::string& out, std::uint32_t requestId, const Request& r) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(r.op),
              [&] { layoutOf(r.op).writeRequest(out, r); });
}

DecodeError decodeRequest(std::uint8_t code, std::string_view body, const Limits& limits,
                          Request& r) {
  if (!isKnownOp(code)) {
    return {Status::kBadRequest, fmt::format("unknown operation code {}", code)};
  }
  r = Request{};
  r.op = static_cast<Op>(code);
  RequestDecoder d(body, limits);
  const bool ok = layoutOf(r.op).readRequest(d, d.reader(), r);
  return d.finish(ok, r.op);
}

void encodeReply(std::string& out, std::uint32_t requestId, Op op, const Reply& r) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(Status::kOk),
              [&] { layoutOf(op).writeReply(out, r); });
}

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
  constexpr std::size_t kAny = static_cast<std::size_t>(-1);
  const bool ok = in.u8(type) && in.string(e.rdzvId, kAny, tooLarge) && in.i64(e.round) &&
                  in.i64(e.exitCode) && in.string(e.message, kAny, tooLarge) && in.atEnd();
  if (!ok || type < 1 || type > 2) return false;
  e.type = static_cast<EventType>(type);
  return true;
}

void encodeClosed(std::string& out, std::uint32_t requestId, std::string_view message,
                  const JobFailure& failure) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(Status::kClosed), [&] {
    putString(out, message);
    putI64(out, failure.exitCode);
    putString(out, failure.report);
  });
}

void encodeError(std::string& out, std::uint32_t requestId, Status status,
                 std::string_view message) {
  appendFrame(out, requestId, static_cast<std::uint8_t>(status), [&] { putString(out, message); });
}

bool decodeReply(Op op, std::uint8_t code, std::string_view body, Reply& r, std::string& error) {
  r = Reply{};
  if (code > static_cast<std::uint8_t>(Status::kClosed)) {
    error = fmt::format("unknown reply status {}", code);
    return false;
  }
  r.status = static_cast<Status>(code);
  ReplyReader in{ByteReader(body)};
  bool ok = false;
  if (r.status == Status::kClosed) {
    ok = in.string(r.message) && in.in.i64(r.failure.exitCode) && in.string(r.failure.report);
  } else if (r.status != Status::kOk) {
    ok = in.string(r.message);
  } else {
    ok = isKnownOp(static_cast<std::uint8_t>(op)) && layoutOf(op).readReply(in, r);
  }
  if (!ok || !in.in.atEnd()) {
    error = fmt::format("the server's {} reply to {} has a malformed body of {} bytes",
                        statusName(r.status), opName(op), body.size());
    return false;
  }
  return true;
}

}  // namespace ddprun::rendezvous::protocol
