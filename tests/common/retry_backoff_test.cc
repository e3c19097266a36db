#include "ddprun/common/retry_backoff.h"

#include <sys/wait.h>
#include <unistd.h>

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

// Thousands of relays started at once (forked, or in one process) must not
// share a seed: each draws its own, and a forked child draws other seeds
// than its parent.
TEST(RetryBackoff, EachSeedDiffersAndAForkedChildDrawsItsOwn) {
  std::set<std::uint64_t> seeds;
  for (int i = 0; i < 1000; ++i) seeds.insert(jitterSeed());
  EXPECT_EQ(seeds.size(), 1000u);
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::uint64_t seed = jitterSeed();
    ::_exit(::write(pipeFds[1], &seed, sizeof seed) == sizeof seed ? 0 : 1);
  }
  const std::uint64_t parentSeed = jitterSeed();
  std::uint64_t childSeed = 0;
  ASSERT_EQ(::read(pipeFds[0], &childSeed, sizeof childSeed),
            static_cast<ssize_t>(sizeof childSeed));
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
  EXPECT_NE(childSeed, parentSeed);
  EXPECT_EQ(seeds.count(childSeed), 0u);
}

}  // namespace
}  // namespace ddprun
