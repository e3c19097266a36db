// loopback_ceiling: the round trips per second this machine's kernel allows
// with no store at all: N client threads each send 32 bytes and wait for
// them back from a trivial thread-per-connection echo server, over TCP
// loopback or a Unix-domain socket. It bounds what any store can do here.
//
//   build/bin/loopback_ceiling [--uds] [CONNECTIONS]      (default 64)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  bool uds = false;
  int connections = 64;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--uds") {
      uds = true;
    } else {
      connections = std::atoi(argv[i]);
    }
  }
  constexpr int kRoundTrips = 20000;
  const int family = uds ? AF_UNIX : AF_INET;
  const int listener = ::socket(family, SOCK_STREAM, 0);
  sockaddr_un unixAddr{};
  unixAddr.sun_family = AF_UNIX;
  const char name[] = "\0ddprun-loopback-ceiling";  // abstract namespace
  std::memcpy(unixAddr.sun_path, name, sizeof(name));
  const auto unixLen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + sizeof(name) - 1);
  sockaddr_in inetAddr{};
  inetAddr.sin_family = AF_INET;
  inetAddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t inetLen = sizeof(inetAddr);
  auto* addr =
      uds ? reinterpret_cast<sockaddr*>(&unixAddr) : reinterpret_cast<sockaddr*>(&inetAddr);
  const socklen_t addrLen = uds ? unixLen : inetLen;
  if (::bind(listener, addr, addrLen) != 0 || ::listen(listener, 4096) != 0) {
    std::perror("loopback_ceiling: bind/listen");
    return 1;
  }
  if (!uds) ::getsockname(listener, addr, &inetLen);

  std::thread server([&] {
    std::vector<std::thread> echoes;
    for (int i = 0; i < connections; ++i) {
      const int fd = ::accept(listener, nullptr, nullptr);
      echoes.emplace_back([fd] {
        char buffer[64];
        while (::read(fd, buffer, 32) > 0) {
          if (::write(fd, buffer, 32) != 32) break;
        }
        ::close(fd);
      });
    }
    for (auto& t : echoes) t.join();
  });
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int i = 0; i < connections; ++i) {
    clients.emplace_back([&] {
      const int fd = ::socket(family, SOCK_STREAM, 0);
      if (::connect(fd, addr, addrLen) != 0) return;
      const int one = 1;
      if (!uds) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      char buffer[64] = {};
      for (int j = 0; j < kRoundTrips; ++j) {
        if (::write(fd, buffer, 32) != 32 || ::read(fd, buffer, 32) != 32) break;
      }
      ::close(fd);
    });
  }
  for (auto& t : clients) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s, %d connections: %.0f round trips/s\n", uds ? "unix socket" : "tcp loopback",
              connections, connections * kRoundTrips / seconds);
  server.join();
  return 0;
}
