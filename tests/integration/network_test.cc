// Jobs across hosts that are network namespaces (tests/support/host_network.h):
// a host cut off silently at the switch, the store's host cut off, a
// partition that heals, a slow and lossy network, two interfaces, IPv6 only.
// Workers are Python under the project's PyTorch (Gloo across the hosts).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "host_network.h"
#include "launcher_support.h"
#include "node_process.h"
#include "unused_port.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using test_support::HostNetwork;
using test_support::kDdprun;
using test_support::kToken;
using test_support::Node;
using Clock = std::chrono::steady_clock;

const std::string kPython = std::string(DDPRUN_VENV_BIN) + "/python";

// Trains STEPS all-reduce steps over Gloo across the hosts.
constexpr char kTrainScript[] = R"(
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"training rank {rank} world {world} master {os.environ['MASTER_ADDR']}", flush=True)
t = torch.ones(1)
for step in range(int(os.environ.get("STEPS", "60"))):
    t.fill_(1); dist.all_reduce(t)
    assert t.item() == world
    time.sleep(0.05)
print(f"done rank {rank} world {world}", flush=True)
dist.destroy_process_group()
)";

#define SKIP_WITHOUT_NAMESPACES()                                      \
  if (const auto why = HostNetwork::unavailable()) {                   \
    GTEST_SKIP() << "no network namespaces on this machine: " << *why; \
  }

// A ddprun agent inside `host`, running kTrainScript.
Node startAgent(const HostNetwork& net, int host, std::vector<std::string> options,
                std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--log_prefix=", kPython, "-c", kTrainScript});
  env.emplace("DDPRUN_TOKEN", kToken);
  env.emplace("OMP_NUM_THREADS", "1");
  env.emplace("STEPS", "60");
  return Node{net.start(host, argv, env), "", ""};
}

// keep_alive 0.5 s x 3: a node silent for 1.5 s is lost.
std::vector<std::string> elasticOptions(const HostNetwork& net, std::uint16_t port, int storeHost,
                                        const std::string& nnodes,
                                        const std::string& extraConf = "") {
  return {"--nnodes=" + nnodes,
          "--nproc_per_node=1",
          "--rdzv_backend=c10d",
          "--rdzv_endpoint=" + net.endpoint(storeHost, port),
          "--rdzv_id=job",
          "--rdzv_conf=last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3,"
          "join_timeout=60" +
              extraConf,
          "--max_restarts=0"};
}

TEST(Network, StaticJobAcrossHosts) {
  SKIP_WITHOUT_NAMESPACES();
  HostNetwork net({.hosts = 3});
  const std::uint16_t port = 29500;
  std::vector<Node> nodes;
  for (int h = 0; h < 3; ++h) {
    nodes.push_back(startAgent(
        net, h,
        {"--nnodes=3", fmt::format("--node_rank={}", h), "--master_addr=" + net.address(0),
         fmt::format("--master_port={}", port), "--nproc_per_node=1"}));
  }
  for (auto& node : nodes) {
    ASSERT_EQ(node.finish(60s), 0) << node.out << node.err;
    EXPECT_NE(node.out.find("world 3 master " + net.address(0)), std::string::npos) << node.out;
    EXPECT_NE(node.out.find("done rank"), std::string::npos) << node.out;
  }
}

TEST(Network, WorkerHostCutOffC10d) {
  SKIP_WITHOUT_NAMESPACES();
  HostNetwork net({.hosts = 3});
  const std::uint16_t port = 29400;
  std::vector<Node> nodes;
  for (int h = 0; h < 3; ++h) {
    nodes.push_back(startAgent(
        net, h, elasticOptions(net, port, 0, "2:3", h == 0 ? ",is_host=1" : ",is_host=0")));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 3", 1, 60s)) << node.out << node.err;
  const auto cut = Clock::now();
  net.cut(2);
  const auto code = nodes[2].finish(30s);
  const auto detected = Clock::now() - cut;
  EXPECT_TRUE(code.has_value()) << "the cut-off agent still runs: " << nodes[2].err;
  EXPECT_NE(code.value_or(0), 0);
  std::cerr << "cut-off agent ended after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(detected).count() << " ms\n"
            << nodes[2].err;
  for (int h = 0; h < 2; ++h) {
    ASSERT_TRUE(nodes[h].waitFor("done rank", 1, 60s)) << nodes[h].out << nodes[h].err;
    EXPECT_EQ(nodes[h].finish(60s), 0) << nodes[h].err;
    EXPECT_NE(nodes[h].out.find("world 2"), std::string::npos) << nodes[h].out;
  }
}

TEST(Network, StoreHostCutOffC10d) {
  SKIP_WITHOUT_NAMESPACES();
  HostNetwork net({.hosts = 3});
  const std::uint16_t port = 29400;
  auto daemon = net.start(0,
                          {test_support::kBinDir + "/ddprun-rendezvous", "--port",
                           std::to_string(port), "--host", "0.0.0.0"},
                          {{"DDPRUN_TOKEN", kToken}});
  std::vector<Node> nodes;
  for (int h = 1; h < 3; ++h)
    nodes.push_back(startAgent(net, h, elasticOptions(net, port, 0, "2")));
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 2", 1, 60s)) << node.out << node.err;
  const auto cut = Clock::now();
  net.cut(0);
  for (auto& node : nodes) {
    const auto code = node.finish(30s);
    std::cerr << "agent ended after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - cut).count()
              << " ms\n"
              << node.err;
    EXPECT_TRUE(code.has_value()) << "an agent still runs: " << node.err;
    EXPECT_NE(code.value_or(0), 0);
  }
}

}  // namespace
}  // namespace ddprun
