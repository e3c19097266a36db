// Process groups over real processes (spawn), a real ddprun-rendezvous
// daemon and real Gloo connections.
#include "ddprun/worker/process_group.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "ddprun/common/error.h"
#include "ddprun/worker/spawn.h"
#include "require.h"
#include "unused_port.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;
using test_support::freePort;

TEST(ProcessGroup, CollectivesOnThreeRanks) {
  spawn(3, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    require(group->rank() == rank && group->size() == 3, "rank and size");
    require(group->backend() == Backend::kGloo, "backend");
    const double r = rank;

    auto sum = at::full({5}, r + 1, at::kFloat);
    group->allReduce(sum, ReduceOp::kSum);
    require(at::equal(sum, at::full({5}, 6.0, at::kFloat)), "sum float32");

    auto avg = at::full({2, 3}, r, at::kDouble);
    group->allReduce(avg, ReduceOp::kAvg);
    require(at::equal(avg, at::full({2, 3}, 1.0, at::kDouble)), "avg float64");

    auto mn = at::full({4}, 10 - rank, at::kLong);
    group->allReduce(mn, ReduceOp::kMin);
    require(at::equal(mn, at::full({4}, 8, at::kLong)), "min int64");

    auto mx = at::full({4}, rank * 7, at::kInt);
    group->allReduce(mx, ReduceOp::kMax);
    require(at::equal(mx, at::full({4}, 14, at::kInt)), "max int32");

    auto async = at::full({1000}, 1.0f, at::kFloat);
    auto work = group->allReduceAsync(async, ReduceOp::kSum);
    work->wait();
    require(at::equal(async, at::full({1000}, 3.0f, at::kFloat)), "async sum");

    auto data = rank == 2 ? at::arange(6, at::kFloat) : at::zeros({6}, at::kFloat);
    group->broadcast(data, 2);
    require(at::equal(data, at::arange(6, at::kFloat)), "broadcast from rank 2");

    auto gathered = group->allGather(at::full({2}, rank, at::kLong));
    require(gathered.sizes() == at::IntArrayRef({3, 2}), "all_gather shape");
    require(at::equal(gathered, at::tensor({0, 0, 1, 1, 2, 2}, at::kLong).view({3, 2})),
            "all_gather values");

    group->barrier();
    require(group->broadcastString(rank == 0 ? "stop: plateau" : "") == "stop: plateau",
            "broadcastString");
    require(group->broadcastFlag(rank == 1, 1), "broadcastFlag from rank 1");
    require(!group->broadcastFlag(rank == 1, 0), "broadcastFlag from rank 0");
  });
}

TEST(ProcessGroup, SingleProcessNeedsNoStore) {
  Environment single;  // not distributed
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  auto t = at::full({3}, 2.0, at::kFloat);
  group->allReduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(at::equal(t, at::full({3}, 2.0, at::kFloat)));
  EXPECT_EQ(group->allGather(t).sizes(), at::IntArrayRef({1, 3}));
  EXPECT_EQ(group->broadcastString("x"), "x");
}

TEST(ProcessGroup, BadTensorsGetClearErrors) {
  Environment single;
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  auto strided = at::zeros({4, 4}).t();
  try {
    group->allReduce(strided);
    FAIL() << "a non-contiguous tensor was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("contiguous"), std::string::npos) << e.what();
  }
  auto ints = at::ones({2}, at::kLong);
  EXPECT_THROW(group->allReduce(ints, ReduceOp::kAvg), ConfigError);
  auto complex = at::ones({2}, at::kComplexFloat);
  EXPECT_THROW(group->allReduce(complex), ConfigError);
  auto t = at::ones({1});
  EXPECT_THROW(group->broadcast(t, 3), ConfigError);
  EXPECT_THROW(parseBackend("mpi"), ConfigError);
}

TEST(ProcessGroup, DebugModeNamesBothShapesOnAMismatch) {
  spawn(2, [](int rank) {
    ProcessGroupOptions options{Backend::kGloo, 20s, /*debugChecks=*/true};
    auto group = initProcessGroup(options);
    auto t = at::ones({rank == 0 ? 4 : 5}, at::kFloat);
    try {
      group->allReduce(t);
    } catch (const Error& e) {
      const std::string what = e.what();
      require(what.find("TensorShape=[4]") != std::string::npos, "names rank 0's shape: " + what);
      require(what.find("TensorShape=[5]") != std::string::npos, "names rank 1's shape: " + what);
      return;
    }
    throw Error("the mismatch was not detected");
  });
}

TEST(ProcessGroup, DebugModeNamesADtypeMismatch) {
  spawn(2, [](int rank) {
    ProcessGroupOptions options{Backend::kGloo, 20s, /*debugChecks=*/true};
    auto group = initProcessGroup(options);
    auto t = at::ones({3}, rank == 0 ? at::kFloat : at::kDouble);
    try {
      group->broadcast(t, 0);
    } catch (const Error& e) {
      const std::string what = e.what();
      require(what.find("TensorDtypes=Double") != std::string::npos &&
                  what.find("TensorDtypes=Float") != std::string::npos,
              "names both dtypes: " + what);
      return;
    }
    throw Error("the mismatch was not detected");
  });
}

TEST(ProcessGroup, AVanishedPeerIsATimeoutNotAHang) {
  spawn(2, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 3s});
    if (rank == 1) return;  // leaves without taking part
    auto t = at::ones({16});
    const auto start = std::chrono::steady_clock::now();
    try {
      group->allReduce(t);
    } catch (const Error& e) {
      require(std::chrono::steady_clock::now() - start < 20s, "bounded by the timeout");
      require(std::string(e.what()).find("rank 0") != std::string::npos, e.what());
      return;
    }
    throw Error("all_reduce with a vanished peer returned");
  });
}

TEST(ProcessGroup, DebugModeNamesTheRankThatNeverArrived) {
  spawn(2, [](int rank) {
    ProcessGroupOptions options{Backend::kGloo, 2s, /*debugChecks=*/true};
    auto group = initProcessGroup(options);
    if (rank == 1) return;
    auto t = at::ones({16});
    try {
      group->allReduce(t);
    } catch (const TimeoutError& e) {
      require(std::string(e.what()).find("Ranks 1 failed to pass monitoredBarrier") !=
                  std::string::npos,
              e.what());
      return;
    }
    throw Error("expected a TimeoutError");
  });
}

// `srun ./train` without ddprun: only SLURM's variables and a shared token.
// Rank 0 hosts ddprun-rendezvous at MASTER_ADDR:MASTER_PORT, the others
// connect there.
TEST(ProcessGroup, UnderPlainSrunRankZeroHostsTheStore) {
  const std::uint16_t port = freePort();
  spawn(2, [port](int rank) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "DDPRUN_STORE_HOST", "DDPRUN_STORE_PORT", "DDPRUN_STORE_PREFIX"}) {
      ::unsetenv(name);
    }
    const std::map<std::string, std::string> slurm = {{"SLURM_JOB_ID", "4242"},
                                                      {"SLURM_PROCID", std::to_string(rank)},
                                                      {"SLURM_LOCALID", std::to_string(rank)},
                                                      {"SLURM_NTASKS", "2"},
                                                      {"SLURM_NNODES", "1"},
                                                      {"SLURM_NODEID", "0"},
                                                      {"SLURM_JOB_NODELIST", "localhost"},
                                                      {"SLURM_TASKS_PER_NODE", "2"},
                                                      {"MASTER_ADDR", "127.0.0.1"},
                                                      {"MASTER_PORT", std::to_string(port)}};
    for (const auto& [name, value] : slurm) ::setenv(name.c_str(), value.c_str(), 1);
    const auto env = Environment::detect();
    require(env.source == Environment::Source::kSlurm, env.describe());
    auto group = initProcessGroup({Backend::kGloo, 30s});
    auto t = at::full({3}, rank + 1.0);
    group->allReduce(t);
    require(at::equal(t, at::full({3}, 3.0)), "sum over the rank-0-hosted store");
  });
}

// What torchrun (or python -m torch.distributed.launch) gives a worker:
// its variables and no DDPRUN_TOKEN.
void becomeATorchrunWorker(int rank, int worldSize, std::uint16_t port, bool agentStore) {
  for (const char* name : {"DDPRUN_TOKEN", "DDPRUN_STORE_HOST", "DDPRUN_STORE_PORT",
                           "DDPRUN_STORE_PREFIX", "TORCHELASTIC_USE_AGENT_STORE"}) {
    ::unsetenv(name);
  }
  const std::map<std::string, std::string> torchrun = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(worldSize)},
      {"LOCAL_WORLD_SIZE", std::to_string(worldSize)},
      {"GROUP_RANK", "0"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RUN_ID", "none"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_USE_AGENT_STORE", agentStore ? "True" : "False"}};
  for (const auto& [name, value] : torchrun) ::setenv(name.c_str(), value.c_str(), 1);
}

// torchrun's c10d rendezvous (TORCHELASTIC_USE_AGENT_STORE=False): rank 0
// hosts PyTorch's TCPStore at MASTER_PORT, as torch.distributed's env://.
TEST(ProcessGroup, UnderTorchrunWithoutATokenRankZeroHostsATcpStore) {
  const std::uint16_t port = freePort();
  spawn(3, [port](int rank) {
    becomeATorchrunWorker(rank, 3, port, /*agentStore=*/false);
    const auto env = Environment::detect();
    require(env.token.empty() && env.source == Environment::Source::kTorchrun, env.describe());
    auto group = initProcessGroup({Backend::kGloo, 30s});
    auto t = at::full({3}, rank + 1.0);
    group->allReduce(t);
    require(at::equal(t, at::full({3}, 6.0)), "sum over rank 0's TCPStore");
    require(group->store().getNumKeys() > 0, "the group bootstrapped through the store");
  });
}

// torchrun 2.x, and 1.13 with a static rendezvous
// (TORCHELASTIC_USE_AGENT_STORE=True): the agent hosts a TCPStore at
// MASTER_PORT and every rank is its client. The agent here is LibTorch's
// own TCPStore server in the test process.
TEST(ProcessGroup, UnderTorchrunTheAgentsTcpStoreIsUsed) {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  auto agentStore = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  const std::uint16_t port = agentStore->getPort();
  spawn(2, [port](int rank) {
    becomeATorchrunWorker(rank, 2, port, /*agentStore=*/true);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    auto t = at::full({2}, rank + 1.0);
    group->allReduce(t);
    require(at::equal(t, at::full({2}, 3.0)), "sum over the agent's TCPStore");
  });
  // Both ranks' Gloo addresses went through the agent's store, under the
  // attempt's prefix.
  // (ProcessGroupGloo's device 0 keeps its keys under "0/".)
  EXPECT_TRUE(agentStore->check({"ddprun/none/attempt_0/pg0/0/rank_0"}));
  EXPECT_TRUE(agentStore->check({"ddprun/none/attempt_0/pg0/0/rank_1"}));
}

TEST(Spawn, AFailingRankStopsTheOthersAndIsNamed) {
  try {
    spawn(3, [](int rank) {
      if (rank == 1) throw Error("deliberate failure");
      auto group = initProcessGroup({Backend::kGloo, 60s});  // would wait for rank 1
    });
    FAIL() << "spawn returned although rank 1 failed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exited with code 1"), std::string::npos) << e.what();
  }
}

TEST(Spawn, GivesEachRankTheLauncherEnvironment) {
  spawn(2, [](int rank) {
    auto env = Environment::detect();
    require(env.rank == rank && env.worldSize == 2 && env.localRank == rank, env.describe());
    require(!env.storePrefix.empty() && !env.token.empty(), "store prefix and token");
  });
}

}  // namespace
}  // namespace ddprun::worker
