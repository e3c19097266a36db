#include "ddprun/worker/environment.h"

#include <gtest/gtest.h>

#include "ddprun/common/error.h"

namespace ddprun::worker {
namespace {

using Vars = std::map<std::string, std::string>;
using Source = Environment::Source;

TEST(Environment, DdprunAndTorchrunVariables) {
  const Vars torchrun = {{"RANK", "5"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "4"},
                         {"GROUP_RANK", "1"},
                         {"MASTER_ADDR", "n0"},
                         {"MASTER_PORT", "29500"},
                         {"TORCHELASTIC_RESTART_COUNT", "2"}};
  auto e = Environment::fromVariables(torchrun);
  EXPECT_EQ(e.source, Source::kTorchrun);
  EXPECT_TRUE(e.distributed);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localWorldSize, 4);
  EXPECT_EQ(e.nodeRank, 1);
  EXPECT_EQ(e.restartCount, 2);
  EXPECT_EQ(e.masterAddr, "n0");
  EXPECT_EQ(e.describe(), "rank 5 of 8 (local 1 of 4, node 1), from torchrun's variables");
  Vars ddprun = torchrun;
  ddprun.insert({{"DDPRUN_STORE_HOST", "127.0.0.1"},
                 {"DDPRUN_STORE_PORT", "4000"},
                 {"DDPRUN_STORE_PREFIX", "job/attempt_2/"},
                 {"DDPRUN_TOKEN", "t"}});
  e = Environment::fromVariables(ddprun);
  EXPECT_EQ(e.source, Source::kDdprun);
  EXPECT_EQ(e.storePort, 4000);
  EXPECT_EQ(e.storePrefix, "job/attempt_2/");
}

TEST(Environment, SlurmWhenNoLauncherVariables) {
  const Vars slurm = {{"SLURM_JOB_ID", "777"}, {"SLURM_NNODES", "2"},
                      {"SLURM_NODEID", "1"},   {"SLURM_JOB_NODELIST", "gpu[01-02]"},
                      {"SLURM_PROCID", "6"},   {"SLURM_LOCALID", "2"},
                      {"SLURM_NTASKS", "8"},   {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  const auto e = Environment::fromVariables(slurm);
  EXPECT_EQ(e.source, Source::kSlurm);
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.localRank, 2);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localWorldSize, 4);
  EXPECT_EQ(e.masterAddr, "gpu01");
  EXPECT_EQ(e.masterPort, 15000 + 777);  // the launcher's rule
}

TEST(Environment, SingleProcessAndOverrides) {
  auto e = Environment::fromVariables({});
  EXPECT_EQ(e.source, Source::kSingleProcess);
  EXPECT_FALSE(e.distributed);
  EXPECT_EQ(e.worldSize, 1);
  e = Environment::fromVariables({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_FALSE(e.distributed);  // auto: one process is not distributed
  e = Environment::fromVariables(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
      DistributedMode::kOn);
  EXPECT_TRUE(e.distributed);
  e = Environment::fromVariables({{"RANK", "3"}, {"WORLD_SIZE", "4"}}, DistributedMode::kOff);
  EXPECT_FALSE(e.distributed);
  EXPECT_EQ(e.rank, 0);
  EXPECT_THROW(Environment::fromVariables({}, DistributedMode::kOn), ConfigError);
}

TEST(Environment, InconsistentValuesAreRefused) {
  const std::vector<std::pair<Vars, std::string>> cases = {
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "RANK=4 is not below WORLD_SIZE=4"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}}, "needs MASTER_ADDR and MASTER_PORT"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK=x"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0"},
      {{{"RANK", "0"},
        {"WORLD_SIZE", "2"},
        {"LOCAL_RANK", "2"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"MASTER_ADDR", "h"},
        {"MASTER_PORT", "1"}},
       "LOCAL_RANK=2"},
  };
  for (const auto& [vars, message] : cases) {
    try {
      Environment::fromVariables(vars);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(Environment, DeviceFollowsTheLocalRankNeverTheGlobalRank) {
  Environment e;
  e.rank = 13;
  e.localRank = 5;
  EXPECT_EQ(e.deviceIndex(8), 5);
  EXPECT_EQ(e.deviceIndex(4), 1);
  EXPECT_EQ(e.deviceIndex(0), -1);
}

}  // namespace
}  // namespace ddprun::worker
