#include "ddprun/agent/features/hang_watchdog/hang_watchdog.h"
#include "ddprun/agent/features/parts/sampling_period.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const Clock::time_point kStart{};

WorkerStall worker(int localRank, Clock::duration lastProgress, Clock::duration lastCpu,
                   bool stopped = false) {
  return {localRank, stopped, kStart + lastProgress, kStart + lastCpu};
}

TEST(HangWatchdog, BlamesTheWorkerWhoseProgressStoppedFirst) {
  const auto choice = chooseHungWorker({worker(0, 5s, 5s), worker(1, 3s, 3s), worker(2, 4s, 4s)});
  EXPECT_EQ(choice.index, 1u);
  EXPECT_DOUBLE_EQ(choice.aheadSeconds, 1.0);
  EXPECT_DOUBLE_EQ(choice.cpuAheadSeconds, 0.0);
}

// The soak's and CI's case: rank 1 sleeps before an all_reduce that rank 0
// enters after computing; rank 1's Gloo thread reads what rank 0 sends, so
// both last progressed in the same sample, but rank 1's CPU stopped first.
TEST(HangWatchdog, ATieInTheSameSampleGoesToTheWorkerWhoseCpuStoppedFirst) {
  const auto choice = chooseHungWorker({worker(0, 6s, 6s), worker(1, 6s, 2s)});
  EXPECT_EQ(choice.index, 1u);
  EXPECT_DOUBLE_EQ(choice.aheadSeconds, 0.0);
  EXPECT_DOUBLE_EQ(choice.cpuAheadSeconds, 4.0);
}

TEST(HangWatchdog, AFullTieGoesToTheLowestLocalRank) {
  const auto choice = chooseHungWorker({worker(2, 6s, 2s), worker(1, 6s, 2s), worker(3, 6s, 2s)});
  EXPECT_EQ(choice.index, 1u);
  EXPECT_DOUBLE_EQ(choice.aheadSeconds, 0.0);
  EXPECT_DOUBLE_EQ(choice.cpuAheadSeconds, 0.0);
}

TEST(HangWatchdog, AWorkerStoppedByASignalIsBlamedOverEarlierWaiters) {
  const auto choice =
      chooseHungWorker({worker(0, 1s, 1s), worker(1, 4s, 4s, /*stopped=*/true), worker(2, 2s, 2s)});
  EXPECT_EQ(choice.index, 1u);
  EXPECT_DOUBLE_EQ(choice.aheadSeconds, -1.0);
}

TEST(HangWatchdog, AWorkerAloneHasNoOneToBeAheadOf) {
  const auto choice = chooseHungWorker({worker(0, 1s, 1s)});
  EXPECT_EQ(choice.index, 0u);
  EXPECT_DOUBLE_EQ(choice.aheadSeconds, -1.0);
}

TEST(HangWatchdog, SamplesAQuarterOfTheTimeoutBetween50MsAnd1S) {
  EXPECT_EQ(samplingPeriod(2000ms), 500ms);
  EXPECT_EQ(samplingPeriod(5000ms), 1000ms);
  EXPECT_EQ(samplingPeriod(100ms), 50ms);
}

}  // namespace
}  // namespace ddprun::agent
