// RetryBackoff: the one policy by which ddprun connects again to a server
// that did not answer (the store's clients in connectWithBackoff, the node
// relays' connection to the store): waits that start at `initial` and
// double up to `cap`, each spread +-25 % at random. Thousands of clients
// that lost the same server, or meet a full listen backlog, then come back
// spread out instead of in lockstep.
//
// jitterSeed(): the seed of such a spread (and of any other jitter): drawn
// from a generator that each thread seeds once from the system's entropy,
// mixed with the process id (a forked child draws other seeds than its
// parent). A std::random_device per seed cost a relay 3 % of its CPU in a
// 12,288-relay storm (two per relay; its first use runs cpuid, which a VM
// traps).
//
// Thread-safety: RetryBackoff has one owner; jitterSeed() is thread-safe.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace ddprun {

inline std::uint64_t jitterSeed() {
  thread_local std::mt19937_64 seeds{std::random_device{}()};
  return seeds() ^ (static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ULL);
}

class RetryBackoff {
 public:
  explicit RetryBackoff(std::chrono::milliseconds initial = std::chrono::milliseconds(10),
                        std::chrono::milliseconds cap = std::chrono::milliseconds(1000),
                        std::uint64_t seed = jitterSeed())
      : initial_(initial), cap_(cap), next_(initial), random_(seed) {}

  // The wait before the next attempt (and the one after it doubles).
  std::chrono::milliseconds next() {
    const std::int64_t base = next_.count();
    const std::int64_t spread = base / 4;
    next_ = std::min(next_ * 2, cap_);
    return std::chrono::milliseconds(base - spread +
                                     static_cast<std::int64_t>(random_() % (2 * spread + 1)));
  }
  // A success: the next failure starts from `initial` again.
  void reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds cap_;
  std::chrono::milliseconds next_;
  std::mt19937_64 random_;
};

}  // namespace ddprun
