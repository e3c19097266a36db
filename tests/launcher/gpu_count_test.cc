#include "gpu_count.h"

#include <gtest/gtest.h>

namespace ddprun::launcher {
namespace {

TEST(CudaVisibleDevices, CountsEntriesUntilTheFirstInvalidOne) {
  struct Case {
    const char* value;
    int physical;
    int expected;
  };
  const Case cases[] = {
      {"", 8, 0},        {"0", 8, 1},
      {"0,1,2,3", 8, 4}, {"3,1", 4, 2},
      {"0,8,1", 8, 1},   {"-1", 8, 0},
      {"0,-1,1", 8, 1},  {"1,1", 8, 1},
      {"0, 1", 8, 2},    {"GPU-abc,GPU-def", 8, 2},
      {"MIG-1", 1, 1},   {"x", 8, 0},
      {"0,,1", 8, 1},    {"7", 4, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(countVisibleEntries(c.value, c.physical), c.expected) << "'" << c.value << "'";
  }
}

TEST(CudaVisibleDevices, NoDriverMeansNoGpu) {
  // This machine has no NVIDIA driver: the count must be 0, not a crash.
  EXPECT_GE(countVisibleGpus(), 0);
}

}  // namespace
}  // namespace ddprun::launcher
