// The NCCL backend and CUDA DDP. They need a GPU and a CUDA build of
// LibTorch; elsewhere every test here is skipped, saying why. (One GPU per
// machine here, so the multi-rank cases use a vanished peer rather than a
// second GPU.)
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "ddprun/common/error.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/spawn.h"
#include "ddprun/worker/training.h"
#include "require.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

// Asked in a child process: initialising CUDA here would make every later
// fork (spawn) unable to use it.
bool gpuUsable() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(ncclAvailable() ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define REQUIRE_GPU()                                                                          \
  if (!gpuUsable()) {                                                                          \
    GTEST_SKIP() << "no usable CUDA device or a CPU-only LibTorch: the NCCL backend is built " \
                    "but can only run on a GPU machine";                                       \
  }

TEST(Nccl, CollectivesOnTheRanksDevice) {
  REQUIRE_GPU();
  spawn(1, [](int) {
    auto group = initProcessGroup({Backend::kAuto, 60s});
    require(group->backend() == Backend::kNccl, "auto picks NCCL when CUDA is available");
    require(group->device() == "cuda:0", "device from LOCAL_RANK");
    const auto cuda = torch::TensorOptions().device(torch::Device(group->device()));
    auto t = torch::full({1 << 20}, 2.5, cuda);
    group->allReduce(t, ReduceOp::kAvg);
    require(torch::equal(t.cpu(), torch::full({1 << 20}, 2.5)), "avg");
    auto m = torch::arange(8, cuda.dtype(torch::kLong));
    group->allReduce(m, ReduceOp::kMax);
    group->broadcast(m, 0);
    require(group->allGather(m).sizes() == torch::IntArrayRef({1, 8}), "all_gather");
    group->barrier();
    require(group->broadcastString("nccl") == "nccl", "string");
    require(meanOverRanks(*group, 4.0) == 4.0, "metric");
    bool refused = false;
    try {
      auto cpu = torch::ones({2});
      group->allReduce(cpu);
    } catch (const ConfigError&) {
      refused = true;
    }
    require(refused, "a CPU tensor is refused with a clear error");
  });
}

TEST(Nccl, CudaDdpTrainsLikeAPlainModel) {
  REQUIRE_GPU();
  spawn(1, [](int) {
    auto group = initProcessGroup({Backend::kNccl, 60s});
    const torch::Device device(group->device());
    for (auto sync : {GradientSync::kOverlap, GradientSync::kSimple}) {
      torch::manual_seed(3);
      auto model = torch::nn::Sequential(torch::nn::Linear(64, 256), torch::nn::ReLU(),
                                         torch::nn::Linear(256, 10));
      model->to(device);
      torch::manual_seed(3);
      auto plain = torch::nn::Sequential(torch::nn::Linear(64, 256), torch::nn::ReLU(),
                                         torch::nn::Linear(256, 10));
      plain->to(device);
      DdpOptions options;
      options.sync = sync;
      options.firstBucketBytes = 4 << 10;
      DistributedDataParallel ddp(model.ptr(), group, options);
      torch::optim::SGD a(model->parameters(), 0.1), b(plain->parameters(), 0.1);
      for (int step = 0; step < 5; ++step) {
        auto x = torch::randn({32, 64}, device);
        for (auto* pair : {&a, &b}) pair->zero_grad();
        model->forward(x).pow(2).mean().backward();
        plain->forward(x).pow(2).mean().backward();
        a.step();
        b.step();
      }
      for (std::size_t i = 0; i < model->parameters().size(); ++i) {
        require(torch::allclose(model->parameters()[i], plain->parameters()[i], 1e-5, 1e-6),
                "parameters match a plain model");
      }
    }
  });
}

TEST(Nccl, ARankThatNeverCreatesTheGroupIsNamedWithinTheTimeout) {
  REQUIRE_GPU();
  spawn(2, [](int rank) {
    if (rank == 1) return;  // never creates the group
    const auto start = std::chrono::steady_clock::now();
    try {
      initProcessGroup({Backend::kNccl, 5s});
    } catch (const TimeoutError& e) {
      require(std::chrono::steady_clock::now() - start < 30s, "bounded by the timeout");
      require(
          std::string(e.what()).find("creating the nccl group timed out") != std::string::npos &&
              std::string(e.what()).find("rank(s) 1 never did") != std::string::npos,
          e.what());
      return;
    }
    throw Error("NCCL init with a missing peer returned");
  });
}

// Runs everywhere: the build against a CUDA LibTorch (scripts/build-torch-cuda)
// compiled and linked ProcessGroupNCCL; a CPU LibTorch's build has none.
TEST(Nccl, TheNcclBackendIsBuiltInExactlyWithACudaLibTorch) {
  EXPECT_EQ(ncclBuiltIn(), DDPRUN_EXPECT_NCCL != 0);
  if (!gpuUsable()) {
    std::cout << "no GPU is present: the NCCL collectives were not run (built in: "
              << (ncclBuiltIn() ? "yes" : "no") << ")" << std::endl;
  }
}

TEST(Nccl, RequestingNcclWithoutAGpuIsAClearError) {
  if (gpuUsable()) GTEST_SKIP() << "this machine has a GPU";
  Environment single;
  try {
    initProcessGroup(single, {Backend::kNccl, 5s});
    FAIL() << "nccl was accepted without a GPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos) << e.what();
  }
  EXPECT_EQ(initProcessGroup(single, {Backend::kAuto, 5s})->backend(), Backend::kGloo);
}

}  // namespace
}  // namespace ddprun::worker
