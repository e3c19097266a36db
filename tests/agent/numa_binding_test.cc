// planNumaBinding over a fake sysfs tree: 2 NUMA nodes on 2 sockets, 8 CPUs
// as 4 cores with 2 threads each, 2 L3 caches per node, 4 NVIDIA GPUs (two
// per node) plus a non-NVIDIA device.
#include "ddprun/agent/workers/numa_binding.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ddprun::agent {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

fs::path fakeSys() {
  // One tree per test: ctest runs the tests of this file in parallel.
  const fs::path sys = fs::path(::testing::TempDir()) / "numa-fake-sys" /
                       ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(sys);
  write(sys / "devices/system/node/possible", "0-1");
  write(sys / "devices/system/node/node0/cpulist", "0-3,8-11");
  write(sys / "devices/system/node/node1/cpulist", "4-7,12-15");
  for (int cpu = 0; cpu < 16; ++cpu) {
    const fs::path dir = sys / ("devices/system/cpu/cpu" + std::to_string(cpu));
    const int core = cpu % 8;  // cpu and cpu+8 are hyperthreads of one core
    write(dir / "topology/physical_package_id", std::to_string(core / 4));
    write(dir / "topology/thread_siblings_list",
          std::to_string(core) + "," + std::to_string(core + 8));
    write(dir / "cache/index3/type", "Unified");
    write(dir / "cache/index3/level", "3");
    const int l3 = core / 2;  // two cores per L3
    write(dir / "cache/index3/shared_cpu_list",
          std::to_string(2 * l3) + "-" + std::to_string(2 * l3 + 1) + "," +
              std::to_string(2 * l3 + 8) + "-" + std::to_string(2 * l3 + 9));
    write(dir / "cache/index1/type", "Instruction");
    write(dir / "cache/index1/level", "1");
  }
  const char* gpus[] = {"0000:07:00.0", "0000:0a:00.0", "0000:85:00.0", "0000:88:00.0"};
  for (int i = 0; i < 4; ++i) {
    const fs::path dir = sys / "bus/pci/devices" / gpus[i];
    write(dir / "vendor", "0x10de");
    write(dir / "class", "0x030200");
    write(dir / "numa_node", i < 2 ? "0" : "1");
  }
  write(sys / "bus/pci/devices/0000:00:1f.0/vendor", "0x8086");
  write(sys / "bus/pci/devices/0000:00:1f.0/class", "0x060100");
  return sys;
}

std::vector<int> allCpus() {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < 16; ++cpu) cpus.push_back(cpu);
  return cpus;
}

std::vector<std::string> cpuLists(const NumaPlan& plan) {
  std::vector<std::string> out;
  for (const auto& p : plan.placements) out.push_back(formatCpuList(p.cpus));
  return out;
}

TEST(NumaBinding, CpuLists) {
  EXPECT_EQ(parseCpuList("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(formatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_TRUE(parseCpuList("").empty());
}

TEST(NumaBinding, NodeModeFollowsEachGpusNode) {
  const auto plan = planNumaBinding("node", 4, std::nullopt, allCpus(), fakeSys());
  ASSERT_EQ(plan.placements.size(), 4u) << plan.notice;
  EXPECT_EQ(cpuLists(plan),
            (std::vector<std::string>{"0-3,8-11", "0-3,8-11", "4-7,12-15", "4-7,12-15"}));
  EXPECT_EQ(plan.placements[0].memoryNode, 0);
  EXPECT_EQ(plan.placements[3].memoryNode, 1);
}

TEST(NumaBinding, VisibleDevicesChooseThePhysicalGpu) {
  const auto plan = planNumaBinding("node", 2, std::string("3,0"), allCpus(), fakeSys());
  ASSERT_EQ(plan.placements.size(), 2u) << plan.notice;
  EXPECT_EQ(plan.placements[0].memoryNode, 1);
  EXPECT_EQ(plan.placements[1].memoryNode, 0);
  EXPECT_FALSE(
      planNumaBinding("node", 1, std::string("GPU-1234"), allCpus(), fakeSys()).notice.empty());
}

TEST(NumaBinding, ExclusiveSplitsTheNodesCoresAmongItsGpus) {
  const auto plan = planNumaBinding("exclusive", 4, std::nullopt, allCpus(), fakeSys());
  EXPECT_EQ(cpuLists(plan),
            (std::vector<std::string>{"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"}));
}

TEST(NumaBinding, CoreComplexPicksOneLastLevelCachePerGpu) {
  const auto plan = planNumaBinding("core-complex", 4, std::nullopt, allCpus(), fakeSys());
  EXPECT_EQ(cpuLists(plan),
            (std::vector<std::string>{"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"}));
}

TEST(NumaBinding, SocketModeAndTheAgentsAffinity) {
  auto plan = planNumaBinding("socket", 1, std::nullopt, allCpus(), fakeSys());
  EXPECT_EQ(cpuLists(plan), (std::vector<std::string>{"0-3,8-11"}));
  plan = planNumaBinding("node", 1, std::nullopt, {1, 2, 9}, fakeSys());
  EXPECT_EQ(cpuLists(plan), (std::vector<std::string>{"1-2,9"}));
}

TEST(NumaBinding, NoticesWhenBindingCannotApply) {
  const fs::path sys = fakeSys();
  EXPECT_NE(planNumaBinding("node", 8, std::nullopt, allCpus(), sys).notice.find("8 workers"),
            std::string::npos);
  write(sys / "devices/system/node/possible", "0");
  EXPECT_NE(planNumaBinding("node", 1, std::nullopt, allCpus(), sys).notice.find("single NUMA"),
            std::string::npos);
  fs::remove_all(sys / "bus/pci/devices");
  EXPECT_NE(planNumaBinding("node", 1, std::nullopt, allCpus(), sys).notice.find("no NVIDIA GPU"),
            std::string::npos);
}

}  // namespace
}  // namespace ddprun::agent
