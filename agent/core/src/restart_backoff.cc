#include "ddprun/agent/core/restart_backoff.h"

#include <algorithm>

namespace ddprun::agent {

RestartBackoff::RestartBackoff(BackoffLimits config, std::uint64_t seed)
    : config_(config), random_(seed) {}

std::chrono::milliseconds RestartBackoff::next(std::chrono::milliseconds ranFor) {
  using std::chrono::milliseconds;
  if (config_.max <= milliseconds(0)) return milliseconds(0);
  if (ranFor >= config_.max) failuresInARow_ = 0;  // a healthy run: start over
  ++failuresInARow_;
  if (failuresInARow_ == 1) return milliseconds(0);
  // initial * 2^(failures - 2), capped (the shift is bounded first).
  const int doublings = std::min(failuresInARow_ - 2, 30);
  const auto wait =
      std::min<std::int64_t>(config_.initial.count() << doublings, config_.max.count());
  const std::int64_t half = wait / 2;
  std::uniform_int_distribution<std::int64_t> jitter(0, wait - half);
  return milliseconds(half + jitter(random_));
}

}  // namespace ddprun::agent
