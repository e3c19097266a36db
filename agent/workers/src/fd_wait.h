// waitFor: a bounded wait for one descriptor (poll), for the few places the
// agent's loop thread must block on a child: the preload zygote's replies
// and a forked worker's set-up report.
//
// Thread-safety: a pure function.
#pragma once

#include <poll.h>

#include <cerrno>
#include <chrono>

namespace ddprun::agent {

// Waits until `fd` is ready for `events` (or hung up), at most until
// `deadline`; false on timeout or error.
inline bool waitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return (p.revents & (events | POLLHUP)) != 0;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace ddprun::agent
