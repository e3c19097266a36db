#include "rendezvous_options.h"

#include <gtest/gtest.h>

#include "ddprun/common/error.h"

namespace ddprun::launcher {
namespace {

using agent::RendezvousMode;

std::map<std::string, std::string> slurmEnv() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_NNODES", "3"},
          {"SLURM_NODEID", "2"},
          {"SLURM_JOB_NODELIST", "gpu[07-09]"},
          {"SLURM_TASKS_PER_NODE", "1(x3)"}};
}

LaunchOptions withToken() {
  ::setenv("DDPRUN_TOKEN", "shared", 1);
  return LaunchOptions{};
}

TEST(RendezvousOptions, OneNodeIsStandalone) {
  agent::AgentConfig config;
  applyRendezvousOptions(LaunchOptions{}, {}, config);
  EXPECT_EQ(config.rendezvous.mode, RendezvousMode::kStandalone);
  EXPECT_EQ(config.nnodes, 1);
}

TEST(RendezvousOptions, SlurmFillsTheStaticRendezvous) {
  agent::AgentConfig config;
  applyRendezvousOptions(withToken(), slurmEnv(), config);
  const auto& r = config.rendezvous;
  EXPECT_EQ(r.mode, RendezvousMode::kStatic);
  EXPECT_EQ(r.maxNodes, 3);
  EXPECT_EQ(r.nodeRank, 2);
  EXPECT_EQ(r.endpointHost, "gpu07");
  EXPECT_EQ(r.endpointPort, 15000 + 4242);
  EXPECT_EQ(r.token, "shared");
}

TEST(RendezvousOptions, ExplicitOptionsWinOverSlurm) {
  LaunchOptions o = withToken();
  o.masterAddr = "10.0.0.5";
  o.masterPort = "29999";
  o.nodeRank = "0";
  o.given = {"master_addr", "master_port", "node_rank"};
  agent::AgentConfig config;
  applyRendezvousOptions(o, slurmEnv(), config);
  EXPECT_EQ(config.rendezvous.endpointHost, "10.0.0.5");
  EXPECT_EQ(config.rendezvous.endpointPort, 29999);
  EXPECT_EQ(config.rendezvous.nodeRank, 0);
  EXPECT_EQ(config.rendezvous.localAddr, "10.0.0.5");  // node 0 is the master
  EXPECT_EQ(config.rendezvous.maxNodes, 3);            // still from SLURM
}

TEST(RendezvousOptions, SeveralAgentsPerSlurmNodeAreRefused) {
  auto env = slurmEnv();
  env["SLURM_TASKS_PER_NODE"] = "8(x3)";
  agent::AgentConfig config;
  try {
    applyRendezvousOptions(withToken(), env, config);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--ntasks-per-node=1"), std::string::npos) << e.what();
  }
}

TEST(RendezvousOptions, DynamicReadsTheEndpointAndConf) {
  LaunchOptions o = withToken();
  o.nnodes = "2:4";
  o.rdzvBackend = "c10d";
  o.rdzvEndpoint = "[::1]:1234";
  o.rdzvConf =
      "join_timeout=5,last_call_timeout=0.5,keep_alive_interval=2,"
      "keep_alive_max_attempt=4,is_host=1";
  agent::AgentConfig config;
  applyRendezvousOptions(o, {}, config);
  const auto& r = config.rendezvous;
  EXPECT_EQ(r.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(r.endpointHost, "::1");
  EXPECT_EQ(r.endpointPort, 1234);
  EXPECT_EQ(r.minNodes, 2);
  EXPECT_EQ(r.maxNodes, 4);
  EXPECT_EQ(r.joinTimeout, std::chrono::seconds(5));
  EXPECT_EQ(r.lastCallTimeout, std::chrono::milliseconds(500));
  EXPECT_EQ(r.keepAliveMaxAttempts, 4);
  EXPECT_EQ(r.isHost, true);
  EXPECT_EQ(r.nodeRank, -1);  // not given: by arrival
}

TEST(RendezvousOptions, Endpoints) {
  EXPECT_EQ(parseEndpoint("node1", 29400), (std::pair<std::string, std::uint16_t>{"node1", 29400}));
  EXPECT_EQ(parseEndpoint("node1:80", 29400).second, 80);
  EXPECT_THROW(parseEndpoint(":80", 1), ConfigError);
  EXPECT_THROW(parseEndpoint("h:0", 1), ConfigError);
  EXPECT_THROW(parseEndpoint("[::1", 1), ConfigError);
}

TEST(RendezvousOptions, MultiNodeWithoutATokenIsRefused) {
  ::unsetenv("DDPRUN_TOKEN");
  LaunchOptions o;
  o.nnodes = "2";
  agent::AgentConfig config;
  EXPECT_THROW(applyRendezvousOptions(o, {}, config), ConfigError);
}

}  // namespace
}  // namespace ddprun::launcher
