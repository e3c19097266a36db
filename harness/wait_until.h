// waitUntil(): waits for a condition that another thread or process makes
// true (a server's counter, a published metric), looking again every few
// milliseconds, for at most `limit`. Tests wait for conditions, never for
// a time that a loaded machine may outlast.
#pragma once

#include <chrono>
#include <thread>

namespace ddprun::harness {

// True once `condition()` is; false when `limit` passed first.
template <typename Condition>
bool waitUntil(Condition condition, std::chrono::milliseconds limit = std::chrono::seconds(10),
               std::chrono::milliseconds every = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

}  // namespace ddprun::harness
