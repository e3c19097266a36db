// Little-endian integer and length-prefixed string helpers for the wire
// format. ByteReader never reads past its input and never allocates more
// than the bytes it has; every read reports failure instead of throwing.
//
// Thread-safety: none needed (values on the stack).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ddprun::rendezvous::protocol {

inline void putU8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }

template <typename T>
void putLittleEndian(std::string& out, T value) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(value);
  char bytes[sizeof(U)];
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    bytes[i] = static_cast<char>((u >> (8 * i)) & 0xFF);
  }
  out.append(bytes, sizeof(U));
}

inline void putU16(std::string& out, std::uint16_t v) { putLittleEndian(out, v); }
inline void putU32(std::string& out, std::uint32_t v) { putLittleEndian(out, v); }
inline void putI64(std::string& out, std::int64_t v) { putLittleEndian(out, v); }

inline void putString(std::string& out, std::string_view s) {
  putU32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

class ByteReader {
 public:
  explicit ByteReader(std::string_view input) : input_(input) {}

  std::size_t remaining() const { return input_.size() - pos_; }
  bool atEnd() const { return pos_ == input_.size(); }

  bool u8(std::uint8_t& v) { return fixed(v); }
  bool u16(std::uint16_t& v) { return fixed(v); }
  bool u32(std::uint32_t& v) { return fixed(v); }
  bool i64(std::int64_t& v) { return fixed(v); }

  // Reads a u32 length and that many bytes; fails when the length is over
  // `limit` (sets tooLarge) or more than the bytes that remain.
  bool string(std::string& out, std::size_t limit, bool& tooLarge) {
    std::uint32_t size = 0;
    if (!u32(size)) return false;
    if (size > limit) {
      tooLarge = true;
      return false;
    }
    if (size > remaining()) return false;
    out.assign(input_.data() + pos_, size);
    pos_ += size;
    return true;
  }

 private:
  template <typename T>
  bool fixed(T& value) {
    if (remaining() < sizeof(T)) return false;
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<U>(static_cast<std::uint8_t>(input_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(T);
    value = static_cast<T>(u);
    return true;
  }

  std::string_view input_;
  std::size_t pos_ = 0;
};

}  // namespace ddprun::rendezvous::protocol
