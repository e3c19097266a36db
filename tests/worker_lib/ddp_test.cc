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
#include "ddprun/worker/sync_batch_norm.h"
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

void checkEquivalence(DdpOptions options, double rtol = 1e-5, double atol = 1e-6) {
  const GradientSync sync = options.sync;
  spawn(kWorld, [options, sync, rtol, atol](int rank) mutable {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 60s});
    const Data data = makeData();
    // Different seeds per rank: DDP must start every rank from rank 0's.
    Net net = makeNet(rank == 0 ? 1 : 99);
    options.bucketBytes = 1 << 10;  // several buckets for a small model
    options.firstBucketBytes = 256;
    DistributedDataParallel ddp(net.ptr(), group, options);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      const int begin = step * kWorld * kBatch + rank * kBatch;
      auto rows = torch::indexing::Slice(begin, begin + kBatch);
      // With gradient_as_bucket_view the gradients are views of the
      // buckets, which LibTorch 1.13's zero_grad() cannot detach in place.
      if (options.gradientAsBucketView) {
        ddp.zeroGrad();
      } else {
        sgd.zero_grad();
      }
      torch::mse_loss(net->forward(data.x.index({rows})), data.y.index({rows})).backward();
      sgd.step();
    }
    const auto stats = ddp.lastStepStats();
    if (sync == GradientSync::kOverlap) {
      require(ddp.bucketCount() >= 3, "several buckets");
    } else {
      require(ddp.bucketCount() == 1, "one flat bucket");
    }
    require(stats.buckets == ddp.bucketCount(), "the last step's buckets");
    const auto mine = flatParameters(*net);
    const auto all = group->allGather(mine);
    require(torch::equal(all[0], all[1]), "ranks hold identical parameters");
    if (rank == 0) {
      const auto reference = referenceParameters(data);
      const double worst =
          ((mine - reference).abs() / (reference.abs() + 1e-6)).max().item<double>();
      require(torch::allclose(mine, reference, rtol, atol),
              "equal to one process with the global batch (worst relative difference " +
                  std::to_string(worst) + ")");
    }
  });
}

TEST(DistributedDataParallel, OverlapMatchesOneProcessWithTheGlobalBatch) {
  checkEquivalence({.sync = GradientSync::kOverlap});
}

TEST(DistributedDataParallel, SimpleMatchesOneProcessWithTheGlobalBatch) {
  checkEquivalence({.sync = GradientSync::kSimple});
}

TEST(DistributedDataParallel, StaticGraphAndBucketViewsMatchOneProcess) {
  checkEquivalence({.staticGraph = true, .gradientAsBucketView = true});
}

TEST(DistributedDataParallel, TheAllReduceCommHookMatchesOneProcess) {
  checkEquivalence({.commHook = CommHook::kAllReduce});
}

// fp16 compression rounds every gradient to half precision before the
// all-reduce: the same model up to float16's precision.
TEST(DistributedDataParallel, TheFp16CompressionHookMatchesOneProcessToHalfPrecision) {
  checkEquivalence({.commHook = CommHook::kFp16Compress}, /*rtol=*/2e-3, /*atol=*/1e-4);
}

// c10d's verify_params_across_processes names the first parameter whose
// shape differs, on every rank, before anything is broadcast.
TEST(DistributedDataParallel, RanksWithDifferentModelsAreToldWhichParameter) {
  spawn(kWorld, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 20s});
    torch::nn::Sequential model(torch::nn::Linear(8, 4), torch::nn::Linear(4, rank == 0 ? 2 : 3));
    try {
      DistributedDataParallel ddp(model.ptr(), group);
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      require(what.find("the ranks' models differ") != std::string::npos, what);
      require(what.find("appears not to match") != std::string::npos ||
                  what.find("size") != std::string::npos,
              what);
      return;
    }
    throw Error("different models were accepted");
  });
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

// findUnusedParameters, as in PyTorch: a parameter unused on one rank
// gets the average with that rank's zeros; one unused on every rank keeps
// its .grad() untouched.
TEST(DistributedDataParallel, UnusedParametersBehaveAsInPyTorch) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 20s});
    Net net = makeNet(1);
    DdpOptions options;
    options.findUnusedParameters = true;
    DistributedDataParallel ddp(net.ptr(), group, options);
    auto x = torch::ones({4, 8}) * (rank + 1);
    net->zero_grad();
    auto out = net->forward(x, /*useSide=*/rank == 1).sum();  // rank 0 skips `side`
    ddp.markForwardOutputs({out});
    out.backward();
    auto grads = group->allGather(net->side->weight.grad().contiguous());
    require(torch::equal(grads[0], grads[1]), "both ranks agree on the unused parameter");
    // Rank 1's gradient of sum(side(x)) is x summed over the batch: 4 * 2
    // per weight, averaged with rank 0's zeros.
    require(torch::allclose(grads[0], torch::full({1, 8}, 4.0)), "rank 1's contribution / 2");

    // Unused on every rank: untouched (still undefined after zero_grad's
    // reset to None... or zero: LibTorch's zero_grad zeroes in place).
    net->zero_grad();
    const auto before =
        net->side->weight.grad().defined() ? net->side->weight.grad().clone() : at::Tensor();
    out = net->forward(x, /*useSide=*/false).sum();
    ddp.markForwardOutputs({out});
    out.backward();
    const auto after = net->side->weight.grad();
    require(
        before.defined() == after.defined() && (!after.defined() || torch::equal(before, after)),
        "a parameter no rank used keeps its gradient");
  });
}

// Without findUnusedParameters a parameter one rank skips stalls the
// reduction, as in PyTorch: no rank goes on silently. The rank whose
// buckets are complete waits for the other and times out; the other raises
// PyTorch's "Expected to have finished reduction" at its next backward.
TEST(DistributedDataParallel, AStalledReductionRaisesOnEveryRank) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 3s});
    Net net = makeNet(1);
    DistributedDataParallel ddp(net.ptr(), group);
    auto x = torch::ones({4, 8});
    for (int step = 0; step < 3; ++step) {
      net->zero_grad();
      try {
        net->forward(x, /*useSide=*/rank == 1 || step == 0).sum().backward();
      } catch (const std::exception& e) {
        const std::string what = e.what();
        require(what.find("finished reduction") != std::string::npos ||
                    what.find("imed out") != std::string::npos ||
                    what.find("imeout") != std::string::npos ||
                    what.find("losed") != std::string::npos ||
                    what.find("Connection") != std::string::npos,
                what.substr(0, 300));
        if (what.find("finished reduction") != std::string::npos) {
          // Caught and carried on: the next step raises again, it never
          // trains without synchronisation.
          bool raised = false;
          try {
            net->zero_grad();
            net->forward(x, true).sum().backward();
          } catch (const std::exception&) {
            raised = true;
          }
          require(raised, "the step after a failed one raised too");
        }
        return;
      }
    }
    throw Error("three steps ran although rank 0 skipped a parameter");
  });
}

// PyTorch 1.13's DDP (measured: a comm hook that records bucket sizes)
// starts with one bucket and, after the first step, rebuilds them in the
// order gradients arrived with caps [1 MiB, 25 MiB]: [[fc3.b, fc3.w, fc2.b,
// fc2.w], [fc1.b, fc1.w]] for this model.
TEST(DistributedDataParallel, BucketsFollowPyTorchsAssignment) {
  // In a child: backward in this process would start autograd's threads,
  // after which LibTorch 2.x refuses autograd in forked ranks (spawn()).
  spawn(1, [](int) {
    auto group = initProcessGroup({Backend::kGloo, 5s});
    torch::nn::Sequential mlp(torch::nn::Linear(1024, 2048), torch::nn::ReLU(),
                              torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                              torch::nn::Linear(2048, 100));
    DistributedDataParallel overlap(mlp.ptr(), group);
    // One bucket until the first step shows the order gradients arrive in.
    require(overlap.bucketBytes() == std::vector<std::size_t>{4 * 6500452}, "one bucket first");
    // The Reducer rebuilds them when the second step begins.
    mlp->forward(torch::randn({2, 1024})).sum().backward();
    mlp->forward(torch::randn({2, 1024})).sum().backward();
    require(overlap.bucketBytes() ==
                std::vector<std::size_t>{4 * (100 + 2048 * 100 + 2048 + 2048 * 2048),
                                         4 * (2048 + 1024 * 2048)},
            "Python's rebuilt buckets");
  });
}

TEST(DistributedDataParallel, RefusesAModuleWithoutTrainableParameters) {
  Environment single;
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  auto frozen = std::make_shared<torch::nn::LinearImpl>(2, 2);
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  EXPECT_THROW(DistributedDataParallel(frozen, group), ConfigError);
}

// SyncBatchNorm on two ranks with half a batch each: outputs, input and
// parameter gradients, and running statistics are those of one BatchNorm
// over the whole batch.
TEST(SyncBatchNorm, MatchesOneBatchNormOverTheWholeBatch) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 20s});
    torch::manual_seed(7);
    const auto x = torch::randn({16, 3, 5}, torch::kDouble) * 3 + 1;
    const auto weights = torch::randn({16, 3, 5}, torch::kDouble);  // the loss's
    const auto gamma = torch::randn({3}, torch::kDouble);
    const auto beta = torch::randn({3}, torch::kDouble);
    auto setAffine = [&](at::Tensor& w, at::Tensor& b) {
      torch::NoGradGuard noGrad;
      w.copy_(gamma);
      b.copy_(beta);
    };
    torch::nn::BatchNorm1d reference(torch::nn::BatchNormOptions(3));
    reference->to(torch::kDouble);
    setAffine(reference->weight, reference->bias);
    auto xAll = x.clone().requires_grad_(true);
    const auto yAll = reference->forward(xAll);
    (yAll * weights).sum().backward();

    SyncBatchNorm sync(torch::nn::BatchNormOptions(3), group);
    sync->to(torch::kDouble);
    setAffine(sync->weight, sync->bias);
    const auto rows = torch::indexing::Slice(rank * 8, rank * 8 + 8);
    auto xMine = x.index({rows}).clone().requires_grad_(true);
    const auto y = sync->forward(xMine);
    (y * weights.index({rows})).sum().backward();

    require(torch::allclose(y, yAll.index({rows}), 1e-9, 1e-9), "outputs");
    require(torch::allclose(xMine.grad(), xAll.grad().index({rows}), 1e-9, 1e-9),
            "input gradients");
    auto gradWeight = sync->weight.grad().clone();
    auto gradBias = sync->bias.grad().clone();
    group->allReduce(gradWeight);  // what DDP does (as a sum here: the loss is a sum)
    group->allReduce(gradBias);
    require(torch::allclose(gradWeight, reference->weight.grad(), 1e-9, 1e-9), "weight grad");
    require(torch::allclose(gradBias, reference->bias.grad(), 1e-9, 1e-9), "bias grad");
    require(torch::allclose(sync->running_mean, reference->running_mean, 1e-9, 1e-9),
            "running mean");
    require(torch::allclose(sync->running_var, reference->running_var, 1e-9, 1e-9),
            "running var (unbiased over the whole batch)");
    sync->eval();
    reference->eval();
    require(
        torch::allclose(sync->forward(xMine), reference->forward(xAll).index({rows}), 1e-9, 1e-9),
        "eval uses the running statistics");
    // The names of BatchNorm's state, so state_dicts match Python's.
    std::vector<std::string> names;
    for (const auto& item : sync->named_buffers()) names.push_back(item.key());
    require(names == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"},
            "buffer names");
  });
}

// convertSyncBatchNorm: a Sequential's BatchNorms become
// SyncBatchNorms with the same state, and the converted model on two ranks
// with half a batch each computes what the original computes on the whole
// batch; a BatchNorm inside a typed module is refused with its path.
TEST(SyncBatchNorm, ConvertsTheBatchNormsOfASequential) {
  spawn(kWorld, [](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 20s});
    torch::manual_seed(3);
    torch::nn::Sequential original(torch::nn::Linear(4, 6), torch::nn::BatchNorm1d(6),
                                   torch::nn::ReLU(), torch::nn::Linear(6, 5),
                                   torch::nn::BatchNorm1d(5));
    original->to(torch::kDouble);
    {
      torch::NoGradGuard noGrad;
      original[1]->as<torch::nn::BatchNorm1d>()->running_mean.fill_(0.5);
    }
    auto converted = convertSyncBatchNorm(original, group);
    require(converted->size() == 5, "five entries");
    require(converted[1]->as<SyncBatchNorm>() != nullptr, "the first BatchNorm is synchronised");
    require(converted[4]->as<SyncBatchNorm>() != nullptr, "the second BatchNorm is synchronised");
    require(converted[0].get() == original[0].get(), "other layers are shared");
    require(torch::allclose(converted[1]->as<SyncBatchNorm>()->running_mean,
                            torch::full({6}, 0.5, torch::kDouble)),
            "running statistics are carried over");
    // The state_dict keeps Python's names.
    std::vector<std::string> names;
    for (const auto& item : converted->named_parameters()) names.push_back(item.key());
    require(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                              "3.weight", "3.bias", "4.weight", "4.bias"},
            "parameter names");

    torch::manual_seed(9);
    const auto x = torch::randn({12, 4}, torch::kDouble);
    const auto expected = original->forward(x);
    const auto rows = torch::indexing::Slice(rank * 6, rank * 6 + 6);
    const auto mine = converted->forward(x.index({rows}));
    require(torch::allclose(mine, expected.index({rows}), 1e-9, 1e-9),
            "two ranks with half a batch each compute the whole batch's normalisation");

    struct BlockImpl : torch::nn::Module {
      BlockImpl() { bn = register_module("bn", torch::nn::BatchNorm1d(3)); }
      torch::Tensor forward(const torch::Tensor& x) { return bn(x); }
      torch::nn::BatchNorm1d bn{nullptr};
    };
    torch::nn::Sequential typed(torch::nn::Linear(3, 3), std::make_shared<BlockImpl>());
    try {
      convertSyncBatchNorm(typed, group);
    } catch (const ConfigError& e) {
      require(std::string(e.what()).find("'1.bn'") != std::string::npos, e.what());
      return;
    }
    throw Error("a BatchNorm in a typed member was not refused");
  });
}

}  // namespace
}  // namespace ddprun::worker
