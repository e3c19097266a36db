// RetryBackoff: the one policy by which ddprun connects again to a server
// that did not answer (the store's clients in connectWithBackoff, the node
// relays' connection to the store): waits that start at `initial` and
// double up to `cap`, each spread +-25 % at random. Thousands of clients
// that lost the same server, or meet a full listen backlog, then come back
// spread out instead of in lockstep.
//
// Thread-safety: one owner.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace ddprun {

class RetryBackoff {
 public:
  explicit RetryBackoff(std::chrono::milliseconds initial = std::chrono::milliseconds(10),
                        std::chrono::milliseconds cap = std::chrono::milliseconds(1000),
                        std::uint64_t seed = std::random_device{}())
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
