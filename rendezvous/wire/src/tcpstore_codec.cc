#include "ddprun/rendezvous/tcpstore_codec.h"

#include <fmt/format.h>

#include <cstring>

namespace ddprun::rendezvous::tcpstore {

namespace {

// Opcode tables (reference: tcpstore-wire-protocol.md §3).
bool opFor(Dialect dialect, std::uint8_t code, Op& op) {
  static constexpr Op kV1[] = {Op::kSet,  Op::kCompareSet, Op::kGet,      Op::kAdd,      Op::kCheck,
                               Op::kWait, Op::kGetNumKeys, Op::kWatchKey, Op::kDeleteKey};
  static constexpr Op kV2[] = {Op::kValidate,   Op::kSet,    Op::kCompareSet, Op::kGet,
                               Op::kAdd,        Op::kCheck,  Op::kWait,       Op::kGetNumKeys,
                               Op::kDeleteKey,  Op::kAppend, Op::kMultiGet,   Op::kMultiSet,
                               Op::kCancelWait, Op::kPing};
  if (dialect == Dialect::kV1) {
    if (code >= std::size(kV1)) return false;
    op = kV1[code];
    return true;
  }
  if (code == 17) {
    op = Op::kListKeys;
    return true;
  }
  if (code >= std::size(kV2)) return false;
  op = kV2[code];
  return true;
}

class Reader {
 public:
  Reader(std::string_view in, std::size_t maxBytes) : in_(in), maxBytes_(maxBytes) {}
  bool u8(std::uint8_t& v) { return fixed(v); }
  bool u32(std::uint32_t& v) { return fixed(v); }
  bool i64(std::int64_t& v) { return fixed(v); }
  bool u64(std::uint64_t& v) { return fixed(v); }
  // false: need more bytes (or tooLarge_ set).
  bool string(std::string& out) {
    std::uint64_t size = 0;
    const std::size_t start = pos_;
    if (!u64(size)) return false;
    if (size > maxBytes_) {
      tooLarge_ = true;
      return false;
    }
    if (in_.size() - pos_ < size) {
      pos_ = start;
      return false;
    }
    out.assign(in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool count(std::uint64_t& n) {
    if (!u64(n)) return false;
    if (n > maxBytes_ / 8) {  // each element takes at least its 8-byte length
      tooLarge_ = true;
      return false;
    }
    return true;
  }
  std::size_t pos() const { return pos_; }
  bool tooLarge() const { return tooLarge_; }

 private:
  template <typename T>
  bool fixed(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));  // host order, like the client
    pos_ += sizeof(T);
    return true;
  }
  std::string_view in_;
  std::size_t maxBytes_;
  std::size_t pos_ = 0;
  bool tooLarge_ = false;
};

}  // namespace

Parse decode(std::string_view input, Dialect dialect, std::size_t maxBytes, Request& r,
             std::size_t& consumed, std::string& error) {
  if (input.empty()) return Parse::kNeedMore;
  const auto code = static_cast<std::uint8_t>(input[0]);
  r = Request{};
  if (!opFor(dialect, code, r.op)) {
    error = fmt::format("unknown TCPStore opcode {} ({} dialect)", code,
                        dialect == Dialect::kV1 ? "1.13" : "2.x");
    return Parse::kError;
  }
  Reader in(input.substr(1), maxBytes);
  std::string a, b, c;
  std::uint64_t n = 0;
  bool ok = true;
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      ok = in.u32(r.word);
      break;
    case Op::kSet:
    case Op::kAppend:
      ok = in.string(a) && in.string(b);
      if (ok) r.keys = {a}, r.values = {b};
      break;
    case Op::kCompareSet:
      ok = in.string(a) && in.string(b) && in.string(c);
      if (ok) r.keys = {a}, r.values = {b, c};
      break;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
      ok = in.string(a);
      if (ok) r.keys = {a};
      break;
    case Op::kAdd:
      ok = in.string(a) && in.i64(r.delta);
      if (ok) r.keys = {a};
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      ok = in.count(n);
      for (std::uint64_t i = 0; ok && i < n; ++i) {
        ok = in.string(a);
        if (ok) r.keys.push_back(a);
      }
      break;
    case Op::kMultiSet:
      ok = in.count(n);
      for (std::uint64_t i = 0; ok && i < n; ++i) {
        ok = in.string(a) && in.string(b);
        if (ok) r.keys.push_back(a), r.values.push_back(b);
      }
      break;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      break;
  }
  if (in.tooLarge()) {
    error = fmt::format("a TCPStore request field is over the limit of {} bytes", maxBytes);
    return Parse::kError;
  }
  if (!ok) return Parse::kNeedMore;
  consumed = 1 + in.pos();
  return Parse::kRequest;
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

}  // namespace ddprun::rendezvous::tcpstore
