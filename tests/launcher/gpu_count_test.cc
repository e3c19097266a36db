#include "gpu_count.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "accelerator_count.h"

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

namespace fs = std::filesystem;

// A sysfs tree of its own per test.
fs::path fakeSys(const std::string& name) {
  const fs::path root = fs::path(::testing::TempDir()) / ("fake-sys-" + name);
  fs::remove_all(root);
  return root;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(Accelerators, AmdGpusAreTheKfdNodesWithSimds) {
  const fs::path sys = fakeSys("amd");
  const fs::path nodes = sys / "class/kfd/kfd/topology/nodes";
  write(nodes / "0/properties", "cpu_cores_count 64\nsimd_count 0\n");  // the CPU
  for (int i = 1; i <= 4; ++i) write(nodes / std::to_string(i) / "properties", "simd_count 304\n");
  ::unsetenv("HIP_VISIBLE_DEVICES");
  ::unsetenv("ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(countAmdGpus(sys), 4);
  ::setenv("HIP_VISIBLE_DEVICES", "2,3", 1);
  EXPECT_EQ(countAmdGpus(sys), 2);
  ::setenv("ROCR_VISIBLE_DEVICES", "0", 1);  // applied first: one left, "2" is past it
  EXPECT_EQ(countAmdGpus(sys), 0);
  ::unsetenv("HIP_VISIBLE_DEVICES");
  ::unsetenv("ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(countAmdGpus(fakeSys("none")), 0);
}

TEST(Accelerators, IntelXpusAreI915OrXeCards) {
  const fs::path sys = fakeSys("intel");
  const fs::path drm = sys / "class/drm";
  const fs::path drivers = sys / "bus/pci/drivers";
  const auto card = [&](const std::string& name, const std::string& vendor,
                        const std::string& driver) {
    write(drm / name / "device/vendor", vendor + "\n");
    fs::create_directories(drivers / driver);
    fs::create_symlink(drivers / driver, drm / name / "device/driver");
  };
  card("card0", "0x8086", "xe");
  card("card1", "0x8086", "i915");
  card("card2", "0x10de", "nvidia");                // not Intel
  card("card3", "0x8086", "vfio-pci");              // passed through, not for this host
  write(drm / "card0-DP-1/status", "connected\n");  // a connector, not a card
  ::unsetenv("ZE_AFFINITY_MASK");
  EXPECT_EQ(countIntelXpus(sys), 2);
  ::setenv("ZE_AFFINITY_MASK", "1.0,1.1", 1);  // two tiles of one card
  EXPECT_EQ(countIntelXpus(sys), 1);
  ::unsetenv("ZE_AFFINITY_MASK");
  EXPECT_EQ(countIntelXpus(fakeSys("none")), 0);
}

}  // namespace
}  // namespace ddprun::launcher
