#include "ddprun/agent/core/restart_backoff.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr milliseconds kQuick = 10ms;  // an attempt that failed at once

TEST(RestartBackoff, TheFirstRestartIsImmediateThenItDoublesWithJitterUpToTheCap) {
  RestartBackoff backoff({.initial = 1000ms, .max = 8000ms}, /*seed=*/42);
  EXPECT_EQ(backoff.next(kQuick), 0ms);
  // Equal jitter: between half the wait and the whole of it.
  const milliseconds expected[] = {1000ms, 2000ms, 4000ms, 8000ms, 8000ms, 8000ms};
  for (milliseconds wait : expected) {
    const milliseconds got = backoff.next(kQuick);
    EXPECT_GE(got, wait / 2) << "for a wait of " << wait.count() << " ms";
    EXPECT_LE(got, wait) << "for a wait of " << wait.count() << " ms";
  }
  EXPECT_EQ(backoff.failuresInARow(), 7);
}

TEST(RestartBackoff, ARunAsLongAsTheCapCountsAsHealthy) {
  RestartBackoff backoff({.initial = 1000ms, .max = 8000ms}, 1);
  backoff.next(kQuick);
  EXPECT_GT(backoff.next(kQuick), 0ms);
  EXPECT_EQ(backoff.next(8000ms), 0ms);  // ran long enough: at once again
  EXPECT_EQ(backoff.failuresInARow(), 1);
}

TEST(RestartBackoff, JitterSpreadsTheWaits) {
  RestartBackoff a({.initial = 1000ms, .max = 8000ms}, 1);
  RestartBackoff b({.initial = 1000ms, .max = 8000ms}, 2);
  bool differ = false;
  for (int i = 0; i < 6; ++i) differ = differ || a.next(kQuick) != b.next(kQuick);
  EXPECT_TRUE(differ);
}

TEST(RestartBackoff, AZeroCapNeverWaits) {
  RestartBackoff backoff({.initial = 1000ms, .max = 0ms}, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(backoff.next(kQuick), 0ms);
}

TEST(RestartBackoff, ManyFailuresDoNotOverflow) {
  RestartBackoff backoff({.initial = 1000ms, .max = 30000ms}, 1);
  for (int i = 0; i < 500; ++i) {
    const milliseconds got = backoff.next(kQuick);
    EXPECT_GE(got, 0ms);
    EXPECT_LE(got, 30000ms);
  }
}

}  // namespace
}  // namespace ddprun::agent
