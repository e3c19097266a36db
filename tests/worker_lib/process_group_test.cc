// Process groups over real processes (spawn), a real ddprun-rendezvous
// daemon and real Gloo connections.
#include "ddprun/worker/process_group.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <torch/version.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/worker/spawn.h"
#include "require.h"
#include "scratch_folder.h"
#include "slurm_variables.h"
#include "unused_port.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;
using harness::freePort;

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

// What rank r contributes to the collectives below: distinct per rank and
// per element, so a wrong order or a wrong slice shows.
at::Tensor contribution(int rank, int n = 6) { return at::arange(n, at::kDouble) * 10 + rank + 1; }

// Every collective of torch.distributed against the value computed here
// from every rank's contribution.
TEST(ProcessGroup, EveryCollectiveMatchesALocalReference) {
  spawn(3, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    const int n = 3;
    std::vector<at::Tensor> all;
    for (int r = 0; r < n; ++r) all.push_back(contribution(r));
    const at::Tensor stacked = at::stack(all);

    auto product = contribution(rank);
    group->allReduce(product, ReduceOp::kProduct);
    require(at::allclose(product, stacked.prod(0)), "all_reduce product");

    auto reduced = contribution(rank);
    group->reduce(reduced, 1, ReduceOp::kMax);
    if (rank == 1) require(at::equal(reduced, std::get<0>(stacked.max(0))), "reduce max to 1");

    auto averaged = contribution(rank);
    group->reduce(averaged, 2, ReduceOp::kAvg);
    if (rank == 2) require(at::allclose(averaged, stacked.mean(0)), "reduce avg to 2");

    const auto list = group->allGatherList(contribution(rank));
    require(list.size() == 3u, "all_gather list size");
    for (int r = 0; r < n; ++r) require(at::equal(list[r], all[r]), "all_gather list");

    at::Tensor into = at::empty({18}, at::kDouble);
    group->allGatherInto(into, contribution(rank));
    require(at::equal(into, at::cat(all)), "all_gather_into_tensor");

    const auto gathered = group->gather(contribution(rank), 2);
    if (rank == 2) {
      require(gathered.size() == 3u && at::equal(at::stack(gathered), stacked), "gather to 2");
    } else {
      require(gathered.empty(), "gather: empty off the root");
    }

    at::Tensor piece = at::zeros({6}, at::kDouble);
    std::vector<at::Tensor> pieces;
    if (rank == 0) {
      for (int r = 0; r < n; ++r) pieces.push_back(contribution(r) * 100);
    }
    group->scatter(piece, pieces, 0);
    require(at::equal(piece, contribution(rank) * 100), "scatter from 0");

    // reduce_scatter: rank r's input i is contribution(r) + i; rank i gets
    // the sum over r.
    std::vector<at::Tensor> inputs;
    for (int i = 0; i < n; ++i) inputs.push_back(contribution(rank) + i);
    at::Tensor mine = at::empty({6}, at::kDouble);
    group->reduceScatter(mine, inputs, ReduceOp::kSum);
    require(at::allclose(mine, stacked.sum(0) + n * rank), "reduce_scatter sum");

    // all_to_all: chunk i of rank r's input goes to rank i.
    const at::Tensor input = at::arange(6, at::kLong) + 100 * rank;
    at::Tensor output = at::empty({6}, at::kLong);
    group->allToAll(output, input);
    std::vector<at::Tensor> expected;
    for (int r = 0; r < n; ++r)
      expected.push_back((at::arange(6, at::kLong) + 100 * r).narrow(0, 2 * rank, 2));
    require(at::equal(output, at::cat(expected)), "all_to_all");

    // send/recv around a ring, two tagged messages each way.
    at::Tensor fromLeft = at::empty({4}, at::kFloat);
    at::Tensor tagged = at::empty({4}, at::kFloat);
    const int right = (rank + 1) % n;
    const int left = (rank + n - 1) % n;
    if (rank % 2 == 0) {
      group->send(at::full({4}, rank, at::kFloat), right, 1);
      group->send(at::full({4}, rank + 0.5, at::kFloat), right, 2);
      group->recv(fromLeft, left, 1);
      group->recv(tagged, left, 2);
    } else {
      group->recv(fromLeft, left, 1);
      group->recv(tagged, left, 2);
      group->send(at::full({4}, rank, at::kFloat), right, 1);
      group->send(at::full({4}, rank + 0.5, at::kFloat), right, 2);
    }
    require(at::equal(fromLeft, at::full({4}, left, at::kFloat)), "recv from the left");
    require(at::equal(tagged, at::full({4}, left + 0.5, at::kFloat)), "the tagged message");

    auto async = contribution(rank);
    auto work = group->broadcastAsync(async, 1);
    work->wait();
    require(at::equal(async, contribution(1)), "broadcastAsync from 1");

    const auto bytes =
        group->allGatherBytes(std::string(static_cast<size_t>(rank) * 3, 'a' + rank));
    require(bytes == std::vector<std::string>{"", "bbb", "cccccc"}, "all_gather of bytes");
    group->monitoredBarrier(10s);
  });
}

TEST(ProcessGroup, SubgroupsHaveTheirOwnRanks) {
  spawn(4, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    // Ranks 3 and 1, in that order: 3 is rank 0 of the subgroup.
    auto pair = group->newGroup({3, 1});
    auto rest = group->newGroup({0, 2});
    if (rank == 1 || rank == 3) {
      require(pair && !rest, "members of the pair only");
      require(pair->size() == 2 && pair->rank() == (rank == 3 ? 0 : 1), "subgroup ranks");
      require(pair->globalRank(0) == 3 && pair->globalRank(1) == 1, "global ranks");
      auto t = at::full({2}, rank, at::kLong);
      pair->allReduce(t);
      require(at::equal(t, at::full({2}, 4, at::kLong)), "sum within the pair");
      auto from3 = at::full({1}, rank, at::kLong);
      pair->broadcast(from3, 0);
      require(from3.item<int64_t>() == 3, "broadcast from the subgroup's rank 0");
    } else {
      require(rest && !pair, "members of the rest only");
      auto t = at::full({2}, rank, at::kLong);
      rest->allReduce(t);
      require(at::equal(t, at::full({2}, 2, at::kLong)), "sum within the rest");
    }
    // The whole group still works after the subgroups.
    auto all = at::ones({1});
    group->allReduce(all);
    require(all.item<float>() == 4.0f, "the world group afterwards");
    bool refused = false;
    try {
      group->newGroup({0, 0});
    } catch (const ConfigError&) {
      refused = true;
    }
    require(refused, "a rank listed twice is refused");
  });
}

// Two "nodes" of two ranks each (GROUP_RANK differs): one group per node.
TEST(ProcessGroup, NodeGroupHoldsTheRanksOfThisNode) {
  spawn(4, [](int rank) {
    ::setenv("GROUP_RANK", std::to_string(rank / 2).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(rank % 2).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    require(group->environment().nodeRank == rank / 2, group->environment().describe());
    auto node = group->nodeGroup();
    require(node && node->size() == 2 && node->rank() == rank % 2, "this node's group");
    require(node->globalRank(0) == rank / 2 * 2, "the node's first rank");
    auto t = at::full({1}, rank, at::kLong);
    node->allReduce(t);
    require(t.item<int64_t>() == (rank / 2 == 0 ? 1 : 5), "sum within the node");
  });
}

// Ranks that must stay alive, their connections open, while rank 0 waits
// for them in vain, until rank 0 is done: rank 0 holds an exclusive lock on
// a file from before the group forms (so before any other rank can ask for
// it) until it returns or throws; the others block in flock() meanwhile.
class RankZeroDone {
 public:
  RankZeroDone() : path_(harness::scratch() / "rank0-done") { std::ofstream(path_).put('1'); }
  // In rank 0, before the group forms: a Mark of path() holds the lock
  // until it dies.
  class Mark {
   public:
    explicit Mark(const std::filesystem::path& path)
        : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
      ::flock(fd_, LOCK_EX);
    }
    ~Mark() { ::close(fd_); }
    Mark(const Mark&) = delete;
    Mark& operator=(const Mark&) = delete;

   private:
    int fd_;
  };
  const std::filesystem::path& path() const { return path_; }
  // In the other ranks, after the group formed: returns once rank 0 is done.
  void wait() const {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ::flock(fd, LOCK_SH);
    ::close(fd);
  }

 private:
  std::filesystem::path path_;
};

TEST(ProcessGroup, MonitoredBarrierNamesTheRanksThatDidNotCome) {
  const RankZeroDone done;
  spawn(3, [&done](int rank) {
    std::optional<RankZeroDone::Mark> mark;
    if (rank == 0) mark.emplace(done.path());
    auto group = initProcessGroup({Backend::kGloo, 30s});
    if (rank != 0) {  // ranks 1 and 2 never reach the barrier, alive (exiting
      done.wait();    // would close their connections)
      return;
    }
    try {
      group->monitoredBarrier(1s);
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      require(what.find("Ranks 1, 2 failed to pass monitoredBarrier") != std::string::npos, what);
      return;
    }
    throw Error("monitoredBarrier returned without ranks 1 and 2");
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
  EXPECT_THROW(parseBackend("ucc"), ConfigError);  // in neither Debian LibTorch
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

TEST(ProcessGroup, ARankThatNeverCreatesTheGroupIsNamedWithinTheTimeout) {
  spawn(3, [](int rank) {
    if (rank == 2) return;  // never creates the group
    const auto start = std::chrono::steady_clock::now();
    try {
      initProcessGroup({Backend::kGloo, 2s});
    } catch (const TimeoutError& e) {
      require(std::chrono::steady_clock::now() - start < 20s, "bounded by the timeout");
      const std::string message = e.what();
      require(message.find("2 of 3 ranks arrived; rank(s) 2 never did") != std::string::npos,
              message);
      require(message.find(fmt::format("rank {} of 3: creating the gloo group timed out", rank)) !=
                  std::string::npos,
              message);
      return;
    }
    throw Error("initProcessGroup returned although rank 2 never came");
  });
}

TEST(ProcessGroup, DebugModeNamesTheRankThatNeverArrived) {
  const RankZeroDone done;
  spawn(2, [&done](int rank) {
    std::optional<RankZeroDone::Mark> mark;
    if (rank == 0) mark.emplace(done.path());
    ProcessGroupOptions options{Backend::kGloo, 2s, /*debugChecks=*/true};
    auto group = initProcessGroup(options);
    if (rank == 1) {
      // Alive but never arriving: a rank that exits instead closes its Gloo
      // connection, and rank 0 may see that before the barrier's timeout.
      done.wait();
      return;
    }
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
    const auto slurm = harness::slurmVariables(rank, 2, port, "4242");
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
#if TORCH_VERSION_MAJOR >= 2
  // torchrun's agent store under a LibTorch built without libuv (Debian's).
  if (const char* libuv = std::getenv("USE_LIBUV")) options.useLibUV = std::strcmp(libuv, "0") != 0;
#endif
  auto agentStore = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  const std::uint16_t port = agentStore->getPort();
  spawn(2, [port](int rank) {
    becomeATorchrunWorker(rank, 2, port, /*agentStore=*/true);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    auto t = at::full({2}, rank + 1.0);
    group->allReduce(t);
    require(at::equal(t, at::full({2}, 3.0)), "sum over the agent's TCPStore");
    require(group->store().getNumKeys() >= 2, "the group's keys are in the agent's store");
  });
  // Both ranks' Gloo addresses went through the agent's store.
  EXPECT_GE(agentStore->getNumKeys(), 2);
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
