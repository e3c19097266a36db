#include "ddprun/agent/workers/worker_env.h"

#include <gtest/gtest.h>

#include "ddprun/common/error.h"

#include <algorithm>

namespace ddprun::agent {
namespace {

std::map<std::string, std::string> asMap(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> map;
  for (const auto& e : entries) map[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return map;
}

TEST(WorkerEnv, TorchrunsVariablesAndDdprunsOwn) {
  WorkersSettings config;
  config.nprocPerNode = 4;
  config.role = "trainer";
  config.runId = "job";
  config.maxRestarts = 3;
  config.hostname = "node1";
  WorkerIdentity id;
  id.localRank = 2;
  id.rank = 2;
  id.worldSize = 4;
  id.restartCount = 1;
  id.masterAddr = "127.0.0.1";
  id.masterPort = 29500;
  id.storeHost = "127.0.0.1";
  id.storePort = 40000;
  id.storePrefix = "job/attempt_1/";
  id.errorFile = "/tmp/x/error.json";
  id.token = "secret";
  const auto env = asMap(buildWorkerEnv({{"PATH", "/bin"}, {"RANK", "stale"}}, config, id));
  const std::map<std::string, std::string> expected = {
      {"PATH", "/bin"},
      {"RANK", "2"},
      {"LOCAL_RANK", "2"},
      {"GROUP_RANK", "0"},
      {"ROLE_RANK", "2"},
      {"ROLE_NAME", "trainer"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "4"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", "/tmp/x/error.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"DDPRUN_STORE_HOST", "127.0.0.1"},
      {"DDPRUN_STORE_PORT", "40000"},
      {"DDPRUN_STORE_PREFIX", "job/attempt_1/"},
      {"DDPRUN_TOKEN", "secret"},
      {"DDPRUN_HOSTNAME", "node1"},
  };
  EXPECT_EQ(env, expected);
}

TEST(WorkerEnv, NcclAsyncErrorHandlingIsAlwaysSetUnderOneName) {
  WorkersSettings config;
  config.ncclAsyncErrorHandlingName = "NCCL_ASYNC_ERROR_HANDLING";  // PyTorch < 2.2
  auto env = asMap(buildWorkerEnv({}, config, WorkerIdentity{}));
  EXPECT_EQ(env.at("NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_FALSE(env.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING"));
  env = asMap(buildWorkerEnv({}, WorkersSettings{}, WorkerIdentity{}));  // PyTorch >= 2.2
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING"));
  // A user's value under either name is the value, under the name this
  // PyTorch reads (torchrun 2.x would add 1 over a legacy 0).
  env = asMap(
      buildWorkerEnv({{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, WorkersSettings{}, WorkerIdentity{}));
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
  env = asMap(
      buildWorkerEnv({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}},
                     WorkersSettings{}, WorkerIdentity{}));
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
}

TEST(WorkerEnv, VirtualLocalRankNarrowsTheVisibleDevices) {
  WorkersSettings config;
  config.virtualLocalRank = true;
  WorkerIdentity id;
  id.localRank = 2;
  auto env = asMap(buildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}}, config, id));
  EXPECT_EQ(env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "6");
  env = asMap(buildWorkerEnv({}, config, id));
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "2");
  // Entries are stripped, as torchrun 2.14 does; UUIDs pass unchanged.
  env = asMap(buildWorkerEnv({{"CUDA_VISIBLE_DEVICES", " 3, 5 , GPU-ab12 ,7"}}, config, id));
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-ab12");
  EXPECT_THROW(buildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "0,1"}}, config, id), Error);
}

TEST(WorkerEnv, SignalsToHandleReachTheWorkers) {
  WorkersSettings config;
  config.signalsToHandle = "SIGTERM,SIGUSR1";
  EXPECT_EQ(
      asMap(buildWorkerEnv({}, config, WorkerIdentity{})).at("TORCHELASTIC_SIGNALS_TO_HANDLE"),
      "SIGTERM,SIGUSR1");
}

TEST(WorkerEnv, AgentValuesAndExtraEnvWin) {
  WorkersSettings config;
  config.extraEnv = {{"OMP_NUM_THREADS", "1"}};
  const auto env =
      asMap(buildWorkerEnv({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}, config, WorkerIdentity{}));
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
}

TEST(WorkerEnv, LocalRankMacro) {
  EXPECT_EQ(
      substituteLocalRank({"prog", "--out=log${local_rank}.txt", "${local_rank}${local_rank}"}, 12),
      (std::vector<std::string>{"prog", "--out=log12.txt", "1212"}));
}

TEST(WorkerEnv, SocketInterfaceUnlessTheUserChoseOne) {
  WorkersSettings config;
  WorkerIdentity id;
  id.socketInterface = "eth1";
  auto env = asMap(buildWorkerEnv({}, config, id));
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "=eth1");  // exactly that interface
  env = asMap(buildWorkerEnv({{"GLOO_SOCKET_IFNAME", "ib0"}, {"NCCL_SOCKET_IFNAME", "^docker"}},
                             config, id));
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "ib0");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "^docker");
  id.socketInterface.clear();  // single node, or a loopback address
  env = asMap(buildWorkerEnv({}, config, id));
  EXPECT_FALSE(env.contains("GLOO_SOCKET_IFNAME"));
  EXPECT_FALSE(env.contains("NCCL_SOCKET_IFNAME"));
}

}  // namespace
}  // namespace ddprun::agent
