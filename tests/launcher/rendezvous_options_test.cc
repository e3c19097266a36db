#include "rendezvous_options.h"

#include <gtest/gtest.h>

#include "ddprun/common/error.h"
#include "endpoint.h"

namespace ddprun::launcher {
namespace {

using agent::RendezvousMode;

void apply(const LaunchOptions& o, const std::map<std::string, std::string>& env,
           agent::AgentConfig& config) {
  applyRendezvousOptions(o, env, config);
}

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
  apply(LaunchOptions{}, {}, config);
  EXPECT_EQ(config.rendezvous.mode, RendezvousMode::kStandalone);
  EXPECT_EQ(config.nnodes, 1);
}

TEST(RendezvousOptions, SlurmFillsTheStaticRendezvous) {
  agent::AgentConfig config;
  apply(withToken(), slurmEnv(), config);
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
  apply(o, slurmEnv(), config);
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
    apply(withToken(), env, config);
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
  apply(o, {}, config);
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
  EXPECT_EQ(parseEndpoint("e", "node1", 29400).host, "node1");
  EXPECT_EQ(parseEndpoint("e", "node1", 29400).port, 29400);
  EXPECT_EQ(parseEndpoint("e", "node1:80", 29400).port, 80);
  EXPECT_EQ(parseEndpoint("e", "10.0.0.1:80", 29400).host, "10.0.0.1");
  EXPECT_EQ(parseEndpoint("e", "[::1]:80", 1).host, "::1");
  EXPECT_EQ(parseEndpoint("e", "[::1]", 7).port, 7);
  EXPECT_EQ(parseEndpoint("e", "localhost:0", 1, true).port, 0);
  // Each refused with a message that says what to write instead.
  const std::pair<const char*, const char*> bad[] = {
      {":80", "no host"},
      {"h:0", "not a port"},
      {"[::1", "unclosed"},
      {"::1", "needs brackets"},
      {"::1:29400", "brackets"},
      {"[::1]x", "after ']'"},
      {"[::1]:", "not a port"},
      {"host:", "not a port"},
      {"host:70000", "not a port"},
      {"host:12ab", "not a port"},
      {"[node1]:80", "IPv6"},
      {"bad host:1", "host name"},
      {"", "no host"},
  };
  for (const auto& [text, expected] : bad) {
    try {
      parseEndpoint("rdzv_endpoint", text, 29400);
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("--rdzv_endpoint="), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parseHost("master_addr", "[::1]"), "::1");
  EXPECT_EQ(parseHost("master_addr", "::1"), "::1");
  EXPECT_EQ(parseHost("master_addr", "node-1.cluster"), "node-1.cluster");
  EXPECT_THROW(parseHost("master_addr", "node1:29500"), ConfigError);
}

TEST(RendezvousOptions, MultiNodeWithoutATokenIsOpenWithANotice) {
  ::unsetenv("DDPRUN_TOKEN");
  LaunchOptions o;
  o.nnodes = "2";
  o.masterAddr = "10.1.2.3";
  o.masterPort = "29555";
  agent::AgentConfig config;
  applyRendezvousOptions(o, {}, config);
  EXPECT_EQ(config.rendezvous.mode, RendezvousMode::kStatic);
  EXPECT_TRUE(config.rendezvous.token.empty());
  const std::string& notice = config.rendezvous.openStoreNotice;
  EXPECT_NE(notice.find("10.1.2.3:29555 is open"), std::string::npos) << notice;
  EXPECT_NE(notice.find("DDPRUN_TOKEN"), std::string::npos) << notice;
}

TEST(RendezvousOptions, SingleNodeC10dOnPortZeroIsStandalone) {
  ::unsetenv("DDPRUN_TOKEN");
  LaunchOptions o;
  o.rdzvBackend = "c10d";
  o.rdzvEndpoint = "localhost:0";
  agent::AgentConfig config;
  applyRendezvousOptions(o, {}, config);
  EXPECT_EQ(config.rendezvous.mode, RendezvousMode::kStandalone);
  // A private store: nothing is open.
  EXPECT_TRUE(config.rendezvous.openStoreNotice.empty()) << config.rendezvous.openStoreNotice;
  o.nnodes = "1:2";
  EXPECT_THROW(applyRendezvousOptions(o, {}, config), ConfigError);
}

TEST(RendezvousOptions, ConfKeysShapeTheRendezvous) {
  LaunchOptions o = withToken();
  o.nnodes = "2";
  o.rdzvConf = "timeout=42,read_timeout=7,keep_alive_interval=2,heartbeat_timeout=9";
  agent::AgentConfig config;
  apply(o, {}, config);
  EXPECT_EQ(config.rendezvous.joinTimeout, std::chrono::seconds(42));  // static: timeout
  EXPECT_EQ(config.rendezvous.requestTimeout, std::chrono::seconds(7));
  EXPECT_EQ(config.rendezvous.keepAliveMaxAttempts, 5);  // ceil(9 / 2)
  o.rdzvConf = "store_type=file";
  EXPECT_THROW(apply(o, {}, config), ConfigError);
  o.rdzvConf = "keep_alive_interval=0";
  EXPECT_THROW(apply(o, {}, config), ConfigError);
}

}  // namespace
}  // namespace ddprun::launcher
