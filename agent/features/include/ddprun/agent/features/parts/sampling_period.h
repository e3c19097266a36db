// How often a feature that can only sample /proc for its timeout (the hang
// watchdog, the uninterruptible-sleep watch) does it: a quarter of the
// timeout, between 50 ms and 1 s. The period is the resolution of what it
// finds and the cost it adds (docs/self-healing.md, "Sampling").
//
// Thread-safety: a pure function.
#pragma once

#include <algorithm>
#include <chrono>

namespace ddprun::agent {

inline std::chrono::milliseconds samplingPeriod(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kFinest{50};
  constexpr std::chrono::milliseconds kCoarsest{1000};
  return std::clamp(timeout / 4, kFinest, kCoarsest);
}

}  // namespace ddprun::agent
