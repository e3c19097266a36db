#include "ddprun/rendezvous/tcpstore_codec.h"

#include <fmt/format.h>

#include <cstring>

namespace ddprun::rendezvous::tcpstore {

const char* opName(Op op) {
  switch (op) {
    case Op::kValidate:
      return "VALIDATE";
    case Op::kSet:
      return "SET";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kGetNumKeys:
      return "GET_NUM_KEYS";
    case Op::kWatchKey:
      return "WATCH_KEY";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kAppend:
      return "APPEND";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kCancelWait:
      return "CANCEL_WAIT";
    case Op::kPing:
      return "PING";
    case Op::kQueuePush:
      return "QUEUE_PUSH";
    case Op::kQueuePop:
      return "QUEUE_POP";
    case Op::kQueueLen:
      return "QUEUE_LEN";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
  }
  return "UNKNOWN";
}

namespace {

// Opcode tables (reference: tcpstore-wire-protocol.md §3).
bool opFor(Dialect dialect, std::uint8_t code, Op& op) {
  static constexpr Op kV1[] = {Op::kSet,  Op::kCompareSet, Op::kGet,      Op::kAdd,      Op::kCheck,
                               Op::kWait, Op::kGetNumKeys, Op::kWatchKey, Op::kDeleteKey};
  static constexpr Op kV2[] = {Op::kValidate,   Op::kSet,      Op::kCompareSet, Op::kGet,
                               Op::kAdd,        Op::kCheck,    Op::kWait,       Op::kGetNumKeys,
                               Op::kDeleteKey,  Op::kAppend,   Op::kMultiGet,   Op::kMultiSet,
                               Op::kCancelWait, Op::kPing,     Op::kQueuePush,  Op::kQueuePop,
                               Op::kQueueLen,   Op::kListKeys, Op::kBarrier};
  if (dialect == Dialect::kV1) {
    if (code >= std::size(kV1)) return false;
    op = kV1[code];
    return true;
  }
  if (code >= std::size(kV2)) return false;
  op = kV2[code];
  return true;
}

template <typename T>
bool readFixed(std::string_view in, std::size_t& pos, T& v) {
  if (in.size() - pos < sizeof(T)) return false;
  std::memcpy(&v, in.data() + pos, sizeof(T));  // host order, like the client
  pos += sizeof(T);
  return true;
}

}  // namespace

void Decoder::reset() {
  haveOp_ = false;
  request_ = Request{};
  haveWord_ = haveDelta_ = haveCount_ = false;
  count_ = 0;
  held_ = 0;
}

// The field the request under construction needs next (reference:
// tcpstore-wire-protocol.md §3 for each op's layout).
Decoder::Field Decoder::next() const {
  const Request& r = request_;
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      return haveWord_ ? Field::kDone : Field::kWord;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      if (r.keys.empty()) return Field::kKey;
      return r.values.empty() ? Field::kValue : Field::kDone;
    case Op::kCompareSet:
      if (r.keys.empty()) return Field::kKey;
      return r.values.size() < 2 ? Field::kValue : Field::kDone;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      return r.keys.empty() ? Field::kKey : Field::kDone;
    case Op::kAdd:
    case Op::kBarrier:
      if (r.keys.empty()) return Field::kKey;
      return haveDelta_ ? Field::kDone : Field::kDelta;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      if (!haveCount_) return Field::kCount;
      return r.keys.size() < count_ ? Field::kKey : Field::kDone;
    case Op::kMultiSet:
      if (!haveCount_) return Field::kCount;
      if (r.values.size() < r.keys.size()) return Field::kValue;
      return r.keys.size() < count_ ? Field::kKey : Field::kDone;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return Field::kDone;
  }
  return Field::kDone;
}

Parse Decoder::feed(std::string_view in, std::size_t& consumed, Request& out, std::string& error) {
  std::size_t pos = 0;
  const auto fail = [&](std::string message) {
    consumed = pos;
    error = std::move(message);
    return Parse::kError;
  };
  for (;;) {
    if (!haveOp_) {
      if (pos == in.size()) break;
      const auto code = static_cast<std::uint8_t>(in[pos]);
      if (!opFor(dialect_, code, request_.op)) {
        return fail(dialect_ == Dialect::kV1
                        ? fmt::format("unknown TCPStore opcode {} (1.13 dialect: 0-8)", code)
                        : fmt::format("unknown TCPStore opcode {} (2.x dialect: this server "
                                      "serves 0-18, PyTorch 2.14's ops; a newer PyTorch's "
                                      "client needs a newer ddprun)",
                                      code));
      }
      ++pos;
      haveOp_ = true;
    }
    const Field field = next();
    if (field == Field::kDone) {
      consumed = pos;
      out = std::move(request_);
      reset();
      return Parse::kRequest;
    }
    if (field == Field::kWord) {
      if (!readFixed(in, pos, request_.word)) break;
      haveWord_ = true;
    } else if (field == Field::kDelta) {
      if (!readFixed(in, pos, request_.delta)) break;
      haveDelta_ = true;
    } else if (field == Field::kCount) {
      if (!readFixed(in, pos, count_)) break;
      if (count_ > limits_.maxKeysPerRequest) {
        return fail(fmt::format("a TCPStore request names {} keys, over the limit of {}", count_,
                                limits_.maxKeysPerRequest));
      }
      haveCount_ = true;
    } else {
      // A length-prefixed string: checked before a byte of it is kept.
      std::uint64_t size = 0;
      std::size_t at = pos;
      if (!readFixed(in, at, size)) break;
      const bool key = field == Field::kKey;
      const std::size_t limit = key ? limits_.maxKeyBytes : limits_.maxValueBytes;
      if (size > limit) {
        return fail(fmt::format("a TCPStore {} of {} bytes is over the limit of {} bytes",
                                key ? "key" : "value", size, limit));
      }
      if (held_ + size + kFieldOverheadBytes > limits_.maxRequestBytes) {
        return fail(fmt::format("a TCPStore request is over the limit of {} bytes",
                                limits_.maxRequestBytes));
      }
      if (in.size() - at < size) break;
      auto& list = key ? request_.keys : request_.values;
      list.emplace_back(in.data() + at, size);
      pos = at + size;
      held_ += size + kFieldOverheadBytes;
    }
  }
  consumed = pos;
  return Parse::kNeedMore;
}

void putU8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void putU32(std::string& out, std::uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void putI64(std::string& out, std::int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void putString(std::string& out, std::string_view s) {
  const std::uint64_t size = s.size();
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(s);
}

Opening classifyOpening(std::string_view data) {
  if (data.empty()) return Opening::kNeedMore;
  const auto first = static_cast<std::uint8_t>(data[0]);
  if (first == static_cast<std::uint8_t>('D')) return Opening::kNative;
  if (first > 8) return Opening::kUnknown;
  if (first != 0) return Opening::kTcpStoreV1;
  if (data.size() < kValidateBytes) return Opening::kNeedMore;
  std::uint32_t magic = 0;
  std::memcpy(&magic, data.data() + 1, sizeof(magic));
  // Else a 1.13 SET whose key length started.
  return magic == kValidateMagic ? Opening::kTcpStoreV2 : Opening::kTcpStoreV1;
}

}  // namespace ddprun::rendezvous::tcpstore
