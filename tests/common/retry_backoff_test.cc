#include "ddprun/common/retry_backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace ddprun {
namespace {

using std::chrono::milliseconds;

// The waits double from the first to the cap, each within +-25 %; a reset
// starts again; two clients with different seeds do not wait in lockstep.
TEST(RetryBackoff, DoublesToTheCapWithJitterAndResets) {
  RetryBackoff backoff(milliseconds(10), milliseconds(1000), 1);
  const long long expected[] = {10, 20, 40, 80, 160, 320, 640, 1000, 1000};
  for (const long long base : expected) {
    const auto wait = backoff.next().count();
    EXPECT_GE(wait, base - base / 4) << base;
    EXPECT_LE(wait, base + base / 4) << base;
  }
  backoff.reset();
  EXPECT_LE(backoff.next().count(), 12);
  std::set<long long> firstWaits;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    RetryBackoff client(milliseconds(1000), milliseconds(1000), seed);
    firstWaits.insert(client.next().count());
  }
  EXPECT_GT(firstWaits.size(), 16u);
}

}  // namespace
}  // namespace ddprun
