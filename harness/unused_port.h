// freePort(): a TCP port free on every address now, for tests that must
// name a port before a server binds it (--master_port, the daemon's --port).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace ddprun::harness {

// Below the kernel's ephemeral range (32768+), so that no outgoing
// connection of a test running in parallel takes it between this check and
// the bind; spread by pid so parallel tests seldom try the same ports.
inline bool isFreePort(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return free;
}

inline std::uint16_t freePort() {
  for (int i = 0; i < 12000; ++i) {
    const auto port = static_cast<std::uint16_t>(20000 + (::getpid() * 7 + i) % 12000);
    if (isFreePort(port)) return port;
  }
  throw std::runtime_error("no free port in 20000-31999");
}

// `count` distinct free ports (a cluster's members, each with two).
inline std::vector<std::uint16_t> freePorts(std::size_t count) {
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < 12000 && ports.size() < count; ++i) {
    const auto port = static_cast<std::uint16_t>(20000 + (::getpid() * 13 + i * 7) % 12000);
    if (isFreePort(port)) ports.push_back(port);
  }
  if (ports.size() < count) throw std::runtime_error("not enough free ports in 20000-31999");
  return ports;
}

}  // namespace ddprun::harness
