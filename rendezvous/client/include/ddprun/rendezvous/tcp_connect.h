// connectWithBackoff: the one routine in ddprun that opens a TCP connection
// to a server that may not be up yet.
//
// It resolves the host, tries every address, and on a refused, reset,
// unreachable or timed-out attempt sleeps with exponential backoff (10 ms
// doubling to 1 s, with jitter) until the deadline. The socket it returns
// is blocking-free (O_NONBLOCK), close-on-exec and has TCP_NODELAY set.
//
// Thread-safety: a free function without shared state.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun::rendezvous {

// Returns the connected socket. Throws TimeoutError (with every distinct
// failure seen) when the deadline passes first, and NetworkError soon after
// `*cancel` becomes true (each attempt and each pause is at most 1 s).
// With `source` (a numeric address of this host), connections leave from
// it; when they fail but one from any address of this host succeeds, it
// throws ConfigError at once: the server cannot reach `source`.
int connectWithBackoff(const std::string& host, std::uint16_t port,
                       std::chrono::steady_clock::time_point deadline,
                       const std::atomic<bool>* cancel = nullptr, const std::string& source = "");

}  // namespace ddprun::rendezvous
