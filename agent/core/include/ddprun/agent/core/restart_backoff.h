// RestartBackoff: how long the agent waits before it restarts a failed
// worker group (docs/self-healing.md).
//
// The first restart after a healthy run is immediate: ddprun's millisecond
// recovery stays. Each further failure in a row waits `initial`, then twice
// that, and so on up to `max`, with equal jitter (half the wait fixed, half
// random), so that nodes and jobs that fail together do not restart in
// lock-step. An attempt that ran for at least `max` counts as healthy: the
// failure after it restarts at once again. `max` zero: no back-off at all.
//
// Thread-safety: a plain value, owned by one agent.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace ddprun::agent {

// The waits' bounds (--restart_backoff_initial, --restart_backoff_max).
struct BackoffLimits {
  std::chrono::milliseconds initial{std::chrono::seconds(1)};
  std::chrono::milliseconds max{std::chrono::seconds(30)};
};

class RestartBackoff {
 public:
  explicit RestartBackoff(BackoffLimits config, std::uint64_t seed = std::random_device{}());

  // The wait before restarting after an attempt that ran for `ranFor`.
  std::chrono::milliseconds next(std::chrono::milliseconds ranFor);

  // Failures in a row so far (the last `next` included).
  int failuresInARow() const { return failuresInARow_; }

 private:
  BackoffLimits config_;
  std::mt19937_64 random_;
  int failuresInARow_ = 0;
};

}  // namespace ddprun::agent
