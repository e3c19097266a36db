// monotonicNs(): CLOCK_MONOTONIC in nanoseconds, one clock for every process
// on the machine, so the child processes of a benchmark report times the
// parent can compare with its own.
//
// Thread-safety: any thread.
#pragma once

#include <time.h>

#include <cstdint>

namespace ddprun::bench {

inline std::int64_t monotonicNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

}  // namespace ddprun::bench
