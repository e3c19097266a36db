// The poll(2) timeout that ends at `deadline`: milliseconds, rounded up so a
// sub-millisecond remainder still waits, clamped to poll's int range.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ddprun::rendezvous {

inline int pollTimeoutMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count() + 1, 0, 1 << 30));
}

}  // namespace ddprun::rendezvous
