// RawSocket: a plain blocking TCP connection for tests that must send bytes
// a well-behaved client never would (garbage, half frames, floods).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::harness {

namespace protocol = ::ddprun::rendezvous::protocol;

class RawSocket {
 public:
  // Connects to host:port; from `source` (an address of this machine, e.g.
  // 127.0.0.2 to act as another host) when given.
  RawSocket(const std::string& host, std::uint16_t port, const std::string& source = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!source.empty()) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
        ::close(fd_);
        throw std::runtime_error("RawSocket: cannot bind the source address " + source);
      }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      throw std::runtime_error("RawSocket: connect failed");
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawSocket() { close(); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  int fd() const { return fd_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // Reads whatever arrives until the peer closes or `timeout` passes.
  // Sets `closed` when the peer closed (EOF or reset).
  std::string readUntilClosed(std::chrono::milliseconds timeout, bool& closed) {
    std::string out;
    closed = false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed = true;
        return out;
      }
      out.append(buffer, static_cast<std::size_t>(n));
    }
  }

  // Reads exactly `n` bytes, or returns what came before `timeout`.
  std::string readExactly(std::size_t n, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pending_.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (got <= 0) break;
      pending_.append(buffer, static_cast<std::size_t>(got));
    }
    std::string out = pending_.substr(0, std::min(n, pending_.size()));
    pending_.erase(0, out.size());
    return out;
  }

  // Reads one complete frame (header + body) or returns false on timeout.
  bool readFrame(protocol::FrameHeader& header, std::string& body,
                 std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (protocol::parseFrameHeader(pending_, std::size_t(1) << 31, header) ==
          protocol::ParseResult::kFrame) {
        body = pending_.substr(protocol::kHeaderSize, header.bodySize);
        pending_.erase(0, protocol::kHeaderSize + header.bodySize);
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return false;
      pending_.append(buffer, static_cast<std::size_t>(n));
    }
  }

  // Sends the preamble and a HELLO with `token`; true when accepted.
  bool handshake(const std::string& token) {
    std::string bytes(protocol::kPreamble);
    protocol::encodeRequest(bytes, 1, protocol::Hello{.token = token, .clientName = "raw-test"});
    if (!send(bytes)) return false;
    protocol::FrameHeader header;
    std::string body;
    return readFrame(header, body, std::chrono::seconds(5)) && header.requestId == 1 &&
           header.code == 0;
  }

 private:
  int fd_ = -1;
  std::string pending_;
};

}  // namespace ddprun::harness
