// Join on real processes and real Gloo: ranks with different numbers of
// batches train to the same model as one process that averages what the
// ranks still training contribute, and throwOnEarlyTermination stops every
// rank.
#include "ddprun/worker/join.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <string>

#include "ddprun/common/error.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/spawn.h"
#include "require.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

constexpr int kWorld = 3;
constexpr int kBatch = 8;
constexpr int kMaxSteps = 4;

torch::nn::Sequential makeNet(int seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(6, 32), torch::nn::Tanh(),
                               torch::nn::Linear(32, 32), torch::nn::Tanh(),
                               torch::nn::Linear(32, 1));
}

struct Data {
  torch::Tensor x, y;
};

Data makeData() {
  torch::manual_seed(7);
  auto x = torch::randn({kMaxSteps * kWorld * kBatch, 6});
  return {x, torch::sin(x.sum(1, true))};
}

torch::indexing::Slice rowsOf(int step, int rank) {
  const int begin = (step * kWorld + rank) * kBatch;
  return torch::indexing::Slice(begin, begin + kBatch);
}

torch::Tensor flat(torch::nn::Module& module) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : module.parameters()) parts.push_back(p.detach().reshape(-1));
  return torch::cat(parts);
}

// One process: at each step the gradient of the ranks still training,
// summed and divided by the group size (or by how many still train).
torch::Tensor reference(const Data& data, const std::array<int, kWorld>& steps,
                        bool divideByInitialWorldSize) {
  auto net = makeNet(1);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kMaxSteps; ++step) {
    int training = 0;
    torch::Tensor loss = torch::zeros({});
    for (int r = 0; r < kWorld; ++r) {
      if (steps[r] <= step) continue;
      ++training;
      loss = loss + torch::mse_loss(net->forward(data.x.index({rowsOf(step, r)})),
                                    data.y.index({rowsOf(step, r)}));
    }
    if (training == 0) break;
    sgd.zero_grad();
    (loss / (divideByInitialWorldSize ? kWorld : training)).backward();
    sgd.step();
  }
  return flat(*net);
}

void checkUnevenInputs(std::array<int, kWorld> steps, JoinOptions joinOptions,
                       DdpOptions ddpOptions = {}) {
  spawn(kWorld, [=](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    const Data data = makeData();
    auto net = makeNet(rank == 0 ? 1 : 50 + rank);  // DDP starts all from rank 0's
    DdpOptions options = ddpOptions;
    options.bucketBytes = 1 << 10;  // several buckets
    options.firstBucketBytes = 256;
    DistributedDataParallel ddp(net.ptr(), group, options);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    Join join(ddp, joinOptions);
    for (int step = 0; step < steps[rank]; ++step) {
      sgd.zero_grad();
      auto loss = torch::mse_loss(net->forward(data.x.index({rowsOf(step, rank)})),
                                  data.y.index({rowsOf(step, rank)}));
      if (options.findUnusedParameters) ddp.markForwardOutputs({loss});
      loss.backward();
      sgd.step();
    }
    join.finish();
    const int longest = *std::max_element(steps.begin(), steps.end());
    require(join.shadowedSteps() == longest - steps[rank],
            "rank " + std::to_string(rank) + " shadowed " + std::to_string(join.shadowedSteps()) +
                " steps");
    const auto mine = flat(*net);
    const auto all = group->allGather(mine);
    for (int r = 1; r < kWorld; ++r) {
      require(torch::equal(all[0], all[r]), "every rank ends with the last joiner's model");
    }
    if (rank == 0) {
      const auto expected = reference(data, steps, joinOptions.divideByInitialWorldSize);
      const double worst = (mine - expected).abs().max().item<double>();
      require(torch::allclose(mine, expected, 1e-5, 1e-6),
              "equal to one process (worst difference " + std::to_string(worst) + ")");
    }
    // The DDP keeps training evenly after the Join.
    sgd.zero_grad();
    auto after = net->forward(data.x.index({rowsOf(0, rank)})).sum();
    if (options.findUnusedParameters) ddp.markForwardOutputs({after});
    after.backward();
    sgd.step();
  });
}

TEST(Join, UnevenInputsMatchOneProcessDividingByTheInitialWorldSize) {
  checkUnevenInputs({2, 4, 3}, {});
}

TEST(Join, UnevenInputsMatchOneProcessDividingByTheRanksStillTraining) {
  checkUnevenInputs({2, 4, 3}, {.divideByInitialWorldSize = false});
}

// A rank without a single batch joins before the buckets were ever rebuilt.
TEST(Join, ARankWithNoBatchesShadowsEveryStep) { checkUnevenInputs({0, 3, 1}, {}); }

TEST(Join, UnevenInputsWithFindUnusedParameters) {
  checkUnevenInputs({1, 3, 2}, {}, {.findUnusedParameters = true});
}

TEST(Join, UnevenInputsWithTheFp16CompressionHook) {
  // fp16 rounding: compare with one process only loosely, through the same
  // path; the ranks must still agree exactly.
  spawn(2, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    const Data data = makeData();
    auto net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group, {.commHook = CommHook::kFp16Compress});
    torch::optim::SGD sgd(net->parameters(), 0.1);
    Join join(ddp);
    for (int step = 0; step < (rank == 0 ? 1 : 3); ++step) {
      sgd.zero_grad();
      torch::mse_loss(net->forward(data.x.index({rowsOf(step, rank)})),
                      data.y.index({rowsOf(step, rank)}))
          .backward();
      sgd.step();
    }
    join.finish();
    const auto all = group->allGather(flat(*net));
    require(torch::equal(all[0], all[1]), "the ranks agree");
  });
}

// The first rank to run out makes every rank throw, the others from their
// next synchronised step.
TEST(Join, ThrowOnEarlyTerminationStopsEveryRank) {
  spawn(2, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    const Data data = makeData();
    auto net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    Join join(ddp, {.throwOnEarlyTermination = true});
    int completed = 0;
    try {
      for (int step = 0; step < (rank == 0 ? 1 : 3); ++step) {
        sgd.zero_grad();
        net->forward(data.x.index({rowsOf(step, rank)})).sum().backward();
        sgd.step();
        ++completed;
      }
      join.finish();
    } catch (const Error& e) {
      const std::string what = e.what();
      require(what.find("throwOnEarlyTermination") != std::string::npos, what);
      require(completed == 1, "rank " + std::to_string(rank) + " stopped after one step, not " +
                                  std::to_string(completed));
      return;
    }
    throw Error("rank " + std::to_string(rank) + " did not stop");
  });
}

TEST(Join, RefusesStaticGraph) {
  spawn(1, [](int) {
    auto group = initProcessGroup({Backend::kGloo, 5s});
    auto net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group, {.staticGraph = true});
    try {
      Join join(ddp);
    } catch (const ConfigError& e) {
      require(std::string(e.what()).find("staticGraph") != std::string::npos, e.what());
      return;
    }
    throw Error("Join accepted staticGraph");
  });
}

}  // namespace
}  // namespace ddprun::worker
