// DistributedDataParallel on real processes and real Gloo: equivalence with
// one process on the global batch, gradient accumulation, unused parameters
// and overlap.
#include "ddprun/worker/ddp.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "ddprun/common/error.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/spawn.h"
#include "require.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 1));
    side = register_module("side", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, bool useSide = true) {
    auto y = fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
    return useSide ? y + side(x) : y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

constexpr int kWorld = 2;
constexpr int kSteps = 6;
constexpr int kBatch = 16;  // per rank

struct Data {
  torch::Tensor x, y;
};

Data makeData() {
  torch::manual_seed(123);
  auto x = torch::randn({kSteps * kWorld * kBatch, 8});
  auto y = torch::sin(x.sum(1, true)) + 0.1 * x.narrow(1, 0, 1);
  return {x, y};
}

Net makeNet(int seed) {
  torch::manual_seed(seed);
  return Net();
}

torch::Tensor flatParameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : module.parameters()) flat.push_back(p.detach().reshape(-1));
  return torch::cat(flat);
}

// One process, global batch kWorld * kBatch, plain SGD.
torch::Tensor referenceParameters(const Data& data) {
  Net net = makeNet(1);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    auto rows = torch::indexing::Slice(step * kWorld * kBatch, (step + 1) * kWorld * kBatch);
    sgd.zero_grad();
    torch::mse_loss(net->forward(data.x.index({rows})), data.y.index({rows})).backward();
    sgd.step();
  }
  return flatParameters(*net);
}

void checkEquivalence(GradientSync sync) {
  spawn(kWorld, [sync](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 60s});
    const Data data = makeData();
    // Different seeds per rank: DDP must start every rank from rank 0's.
    Net net = makeNet(rank == 0 ? 1 : 99);
    DdpOptions options;
    options.sync = sync;
    options.bucketBytes = 1 << 10;  // several buckets for a small model
    options.firstBucketBytes = 256;
    DistributedDataParallel ddp(net.ptr(), group, options);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      const int begin = step * kWorld * kBatch + rank * kBatch;
      auto rows = torch::indexing::Slice(begin, begin + kBatch);
      sgd.zero_grad();
      torch::mse_loss(net->forward(data.x.index({rows})), data.y.index({rows})).backward();
      sgd.step();
    }
    const auto stats = ddp.lastStepStats();
    if (sync == GradientSync::kOverlap) {
      require(ddp.bucketCount() >= 3, "several buckets");
      require(stats.bucketsLaunchedDuringBackward >= 1, "buckets launched during backward");
    } else {
      require(ddp.bucketCount() == 1, "one flat bucket");
      require(stats.bucketsLaunchedDuringBackward == 0, "nothing launched during backward");
    }
    const auto mine = flatParameters(*net);
    const auto all = group->allGather(mine);
    require(torch::equal(all[0], all[1]), "ranks hold identical parameters");
    if (rank == 0) {
      const auto reference = referenceParameters(data);
      const double worst =
          ((mine - reference).abs() / (reference.abs() + 1e-6)).max().item<double>();
      require(torch::allclose(mine, reference, /*rtol=*/1e-5, /*atol=*/1e-6),
              "equal to one process with the global batch (worst relative difference " +
                  std::to_string(worst) + ")");
    }
  });
}

TEST(DistributedDataParallel, OverlapMatchesOneProcessWithTheGlobalBatch) {
  checkEquivalence(GradientSync::kOverlap);
}

TEST(DistributedDataParallel, SimpleMatchesOneProcessWithTheGlobalBatch) {
  checkEquivalence(GradientSync::kSimple);
}

TEST(DistributedDataParallel, NoSyncAccumulatesThenAveragesTheSum) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 60s});
    const Data data = makeData();
    Net net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group);
    auto micro = [&](int rankOf, int index) {
      const int begin = (rankOf * 2 + index) * kBatch;
      return torch::indexing::Slice(begin, begin + kBatch);
    };
    net->zero_grad();
    {
      auto guard = ddp.noSync();
      torch::mse_loss(net->forward(data.x.index({micro(rank, 0)})), data.y.index({micro(rank, 0)}))
          .backward();
    }
    // Unsynchronised: this rank's own gradient differs from the other rank's.
    const auto local = net->fc1->weight.grad().clone();
    const auto both = group->allGather(local);
    require(!torch::equal(both[0], both[1]), "no_sync left gradients local");
    torch::mse_loss(net->forward(data.x.index({micro(rank, 1)})), data.y.index({micro(rank, 1)}))
        .backward();
    // Reference: the average over ranks of each rank's two accumulated grads.
    Net ref = makeNet(1);
    ref->zero_grad();
    for (int r = 0; r < kWorld; ++r) {
      for (int i = 0; i < 2; ++i) {
        torch::mse_loss(ref->forward(data.x.index({micro(r, i)})), data.y.index({micro(r, i)}))
            .backward();
      }
    }
    for (std::size_t i = 0; i < net->parameters().size(); ++i) {
      const auto expected = ref->parameters()[i].grad() / kWorld;
      require(torch::allclose(net->parameters()[i].grad(), expected, 1e-5, 1e-7),
              "accumulated gradient " + std::to_string(i));
    }
  });
}

TEST(DistributedDataParallel, UnusedParametersOnOneRankNeverHang) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 20s});
    Net net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group);
    auto x = torch::ones({4, 8}) * (rank + 1);
    net->zero_grad();
    net->forward(x, /*useSide=*/rank == 1).sum().backward();  // rank 0 skips `side`
    auto grads = group->allGather(net->side->weight.grad().contiguous());
    require(torch::equal(grads[0], grads[1]), "both ranks agree on the unused parameter");
    require(grads[0].abs().sum().item<double>() > 0, "it holds rank 1's contribution / 2");
    // A second step works too (the state was reset).
    net->zero_grad();
    net->forward(x, true).sum().backward();
  });
}

// PyTorch 1.13 (dist._compute_bucket_assignment_by_size on the reversed
// parameters, caps [1 MiB, 25 MiB]) gives [[fc3.b, fc3.w, fc2.b, fc2.w],
// [fc1.b, fc1.w]] for this model.
TEST(DistributedDataParallel, BucketsFollowPyTorchsAssignment) {
  Environment single;
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  torch::nn::Sequential mlp(torch::nn::Linear(1024, 2048), torch::nn::ReLU(),
                            torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                            torch::nn::Linear(2048, 100));
  DistributedDataParallel overlap(mlp.ptr(), group);
  EXPECT_EQ(overlap.bucketBytes(),
            (std::vector<std::size_t>{4 * (100 + 2048 * 100 + 2048 + 2048 * 2048),
                                      4 * (2048 + 1024 * 2048)}));
}

TEST(DistributedDataParallel, RefusesAModuleWithoutTrainableParameters) {
  Environment single;
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  auto frozen = std::make_shared<torch::nn::LinearImpl>(2, 2);
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  EXPECT_THROW(DistributedDataParallel(frozen, group), ConfigError);
}

}  // namespace
}  // namespace ddprun::worker
