#include "ddprun/rendezvous/tcp_connect.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "ddprun/common/error.h"
#include "ddprun/common/retry_backoff.h"
#include "poll_timeout.h"

namespace ddprun::rendezvous {

namespace {

using Clock = std::chrono::steady_clock;

struct AddrInfoDelete {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDelete>;

// Binds `fd` to numeric address `source` (port 0); false (errno) if it cannot.
bool bindSource(int fd, int family, const std::string& source) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  if (::getaddrinfo(source.c_str(), "0", &hints, &raw) != 0) {
    errno = EAFNOSUPPORT;
    return false;
  }
  AddrInfoPtr address(raw);
  return ::bind(fd, address->ai_addr, address->ai_addrlen) == 0;
}

// One non-blocking connect attempt to one address, from `source` when not
// empty; returns fd or -1 (errno).
int tryConnect(const addrinfo& addr, Clock::time_point deadline, int& error,
               const std::string& source = "") {
  const int fd =
      ::socket(addr.ai_family, addr.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, addr.ai_protocol);
  if (fd < 0) {
    error = errno;
    return -1;
  }
  if (!source.empty() && !bindSource(fd, addr.ai_family, source)) {
    error = errno;
    ::close(fd);
    return -1;
  }
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      error = errno;
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, pollTimeoutMs(deadline));
    int soError = 0;
    socklen_t len = sizeof(soError);
    if (ready <= 0) {
      soError = ready == 0 ? ETIMEDOUT : errno;
    } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len) != 0) {
      soError = errno;
    }
    if (soError != 0) {
      error = soError;
      ::close(fd);
      return -1;
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  return fd;
}

}  // namespace

int connectWithBackoff(const std::string& host, std::uint16_t port, Clock::time_point deadline,
                       const std::atomic<bool>* cancel, const std::string& source) {
  constexpr auto kMaxAttempt = std::chrono::seconds(1);
  std::set<std::string> failures;  // distinct reasons, for the final message
  RetryBackoff backoff;
  const std::string service = std::to_string(port);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* raw = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &raw);
    AddrInfoPtr addresses(raw);
    if (rc != 0) {
      failures.insert(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
    } else {
      for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
        int error = 0;
        if (cancel != nullptr && cancel->load()) {
          throw NetworkError(
              fmt::format("connecting to the store at {}:{} was cancelled", host, port));
        }
        const int fd =
            tryConnect(*a, std::min(deadline, Clock::now() + kMaxAttempt), error, source);
        if (fd >= 0) return fd;
        failures.insert(std::strerror(error));
      }
      // Not from `source`: if the server answers from anywhere else, it is
      // up and reachable, just not from (or back to) that address -- unless
      // it only just came up, which one more try from `source` tells.
      for (addrinfo* a = addresses.get(); a != nullptr && !source.empty(); a = a->ai_next) {
        int error = 0;
        const int probe = tryConnect(*a, std::min(deadline, Clock::now() + kMaxAttempt), error);
        if (probe < 0) continue;
        ::close(probe);
        const int fd =
            tryConnect(*a, std::min(deadline, Clock::now() + kMaxAttempt), error, source);
        if (fd >= 0) return fd;
        throw ConfigError(fmt::format(
            "the store at {}:{} cannot be reached from {} (this host reaches it from another "
            "address): the other nodes could not reach this node there either; give "
            "--local_addr an address on the network the nodes share, or leave it out",
            host, port, source));
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Never past the deadline.
    const auto sleep = backoff.next();
    if (cancel != nullptr && cancel->load()) {
      throw NetworkError(fmt::format("connecting to the store at {}:{} was cancelled", host, port));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
  }
  std::string reasons;
  for (const auto& f : failures) reasons += (reasons.empty() ? "" : "; ") + f;
  throw TimeoutError(fmt::format(
      "could not connect to the store at {}:{} before the deadline ({}); check that the "
      "server is running and the address is reachable from this host",
      host, port, reasons));
}

}  // namespace ddprun::rendezvous
