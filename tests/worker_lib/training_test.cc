// The sampler (against PyTorch 1.13's DistributedSampler output), metrics,
// the early-stop decision and checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>

#include "ddprun/common/error.h"
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/spawn.h"
#include "ddprun/worker/training.h"
#include "require.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;
using Tail = SamplerOptions::Tail;
using Indices = std::vector<std::vector<std::int64_t>>;

Indices allRanks(std::int64_t n, int replicas, SamplerOptions options, std::uint64_t epoch) {
  Indices out;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(n, replicas, rank, options);
    sampler.setEpoch(epoch);
    EXPECT_EQ(static_cast<std::int64_t>(sampler.indices().size()), sampler.size());
    out.push_back(sampler.indices());
  }
  return out;
}

// Expected values printed by python3-torch 1.13.1:
//   DistributedSampler(ds, num_replicas, rank, shuffle, seed, drop_last); set_epoch(e)
TEST(DistributedSampler, MatchesPyTorch) {
  EXPECT_EQ(allRanks(10, 3, {true, 42, Tail::kPad}, 0),
            (Indices{{2, 8, 0, 7}, {6, 4, 9, 2}, {1, 5, 3, 6}}));
  EXPECT_EQ(allRanks(10, 3, {true, 42, Tail::kPad}, 1),
            (Indices{{8, 0, 6, 3}, {4, 5, 7, 8}, {9, 1, 2, 4}}));
  EXPECT_EQ(allRanks(10, 3, {true, 7, Tail::kDropLast}, 2),
            (Indices{{0, 7, 9}, {5, 6, 1}, {8, 2, 4}}));
  EXPECT_EQ(allRanks(10, 3, {false, 0, Tail::kPad}, 0),
            (Indices{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}));
  EXPECT_EQ(allRanks(5, 4, {true, 0, Tail::kPad}, 3), (Indices{{1, 2}, {0, 1}, {3, 0}, {4, 3}}));
  // More replicas than samples: padding repeats the list several times.
  EXPECT_EQ(allRanks(2, 5, {false, 0, Tail::kPad}, 0), (Indices{{0}, {1}, {0}, {1}, {0}}));
}

TEST(DistributedSampler, MatchesPyTorchOnALargeShuffle) {
  DistributedSampler sampler(100003, 4, 1, {true, 3, Tail::kPad});
  sampler.setEpoch(5);
  const auto indices = sampler.indices();
  ASSERT_EQ(indices.size(), 25001u);
  EXPECT_EQ(std::vector<std::int64_t>(indices.begin(), indices.begin() + 5),
            (std::vector<std::int64_t>{35195, 55499, 91760, 44291, 16434}));
  std::int64_t weighted = 0;
  for (std::size_t i = 0; i < indices.size(); ++i)
    weighted += static_cast<std::int64_t>(i) * indices[i];
  EXPECT_EQ(weighted, 15629391046039);
}

TEST(DistributedSampler, ExactModeVisitsEverySampleOnce) {
  const auto ranks = allRanks(10, 3, {true, 42, Tail::kExact}, 0);
  EXPECT_EQ(ranks[0].size(), 4u);
  EXPECT_EQ(ranks[1].size(), 3u);
  EXPECT_EQ(ranks[2].size(), 3u);
  std::multiset<std::int64_t> seen;
  for (const auto& r : ranks) seen.insert(r.begin(), r.end());
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), 10u);
  // The same order as the padded sampler, without the padding.
  EXPECT_EQ(ranks[0], (std::vector<std::int64_t>{2, 8, 0, 7}));
  EXPECT_EQ(ranks[1], (std::vector<std::int64_t>{6, 4, 9}));
}

TEST(DistributedSampler, EpochsReshuffleAndBadRanksAreRefused) {
  EXPECT_NE(allRanks(100, 2, {}, 0), allRanks(100, 2, {}, 1));
  EXPECT_EQ(allRanks(100, 2, {}, 1), allRanks(100, 2, {}, 1));
  EXPECT_THROW(DistributedSampler(10, 2, 2), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 0, 0), ConfigError);
  EXPECT_TRUE(DistributedSampler(0, 2, 1).indices().empty());
}

TEST(Training, MetricsSkipNaNAndRankZeroDecides) {
  spawn(3, [](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    const double nan = std::numeric_limits<double>::quiet_NaN();
    require(meanOverRanks(*group, rank == 1 ? nan : rank * 2.0) == 2.0, "mean skips NaN");
    const auto means = meanOverRanks(*group, {1.0 * rank, nan});
    require(means[0] == 1.0 && std::isnan(means[1]), "vector means, all-NaN gives NaN");
    // Exact evaluation: ranks with 4, 3, 3 samples.
    const double count = rank == 0 ? 4 : 3;
    require(weightedMeanOverRanks(*group, count * (rank + 1), count) == (4.0 + 6 + 9) / 10,
            "weighted mean");
    require(stopDecision(*group, rank == 0) == true, "rank 0 says stop");
    require(stopDecision(*group, rank != 0) == false, "other ranks cannot decide");
  });
}

TEST(Training, ProgressBarWritesOneLinePerTenthWithoutATerminal) {
  Environment single;
  auto group = initProcessGroup(single, {Backend::kGloo, 5s});
  testing::internal::CaptureStderr();
  ProgressBar bar(*group, 50, "train");
  for (int done = 0; done <= 50; ++done) bar.update(done, "loss 0.1");
  bar.finish();
  const std::string text = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 11) << text;
  EXPECT_NE(text.find("train 100% 50/50 loss 0.1"), std::string::npos) << text;
}

std::string temporaryDirectory() {
  auto dir = std::filesystem::temp_directory_path() / ("ddprun-ckpt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(Checkpoint, RoundTripsModelOptimizerAndStepAtomically) {
  const std::string dir = temporaryDirectory();
  const std::string path = dir + "/ckpt.pt";
  spawn(2, [&](int rank) {
    torch::set_num_threads(1);
    auto group = initProcessGroup({Backend::kGloo, 30s});
    torch::manual_seed(5);
    auto model = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
    torch::optim::Adam adam(model->parameters(), 0.01);
    adam.zero_grad();
    model->forward(torch::randn({8, 3})).sum().backward();
    adam.step();
    saveCheckpoint(*group, path, *model.ptr(), &adam, 17);
    // Every rank sees the complete file and no temporary is left.
    require(checkpointExists(path), "the checkpoint exists on every rank after save");
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      require(entry.path().filename() == "ckpt.pt", "stray file " + entry.path().string());
    }
    torch::manual_seed(6 + rank);
    auto fresh = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
    torch::optim::Adam freshAdam(fresh->parameters(), 0.01);
    require(loadCheckpoint(path, *fresh.ptr(), &freshAdam) == 17, "step");
    for (std::size_t i = 0; i < model->parameters().size(); ++i) {
      require(torch::equal(model->parameters()[i], fresh->parameters()[i]), "parameter");
    }
    for (std::size_t i = 0; i < model->buffers().size(); ++i) {
      require(torch::equal(model->buffers()[i], fresh->buffers()[i]), "buffer");
    }
    // The optimizer state came back: the next steps are identical.
    adam.zero_grad();
    freshAdam.zero_grad();
    for (auto* m : {&model, &fresh}) {
      torch::manual_seed(9);
      (*m)->forward(torch::randn({8, 3})).sum().backward();
    }
    adam.step();
    freshAdam.step();
    require(torch::equal(model->parameters()[0], fresh->parameters()[0]), "optimizer state");
  });
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, AcceptsTheDdpModulePrefixAndNamesWhatIsMissing) {
  const std::string dir = temporaryDirectory();
  torch::manual_seed(1);
  torch::nn::Linear model(2, 2);
  // A checkpoint whose names carry "module." (as a wrapped model's do).
  torch::serialize::OutputArchive archive;
  archive.write("module.weight", model->weight.detach() + 1);
  archive.write("module.bias", model->bias.detach() + 1);
  archive.save_to(dir + "/prefixed.pt");
  torch::nn::Linear fresh(2, 2);
  EXPECT_EQ(loadCheckpoint(dir + "/prefixed.pt", *fresh.ptr(), nullptr), 0);
  EXPECT_TRUE(torch::equal(fresh->weight, model->weight + 1));

  // And the other way round: our own checkpoint into a model whose names
  // carry the prefix.
  writeCheckpoint(dir + "/plain.pt", *model.ptr(), nullptr, 3);
  torch::nn::Sequential wrapped;
  wrapped->push_back("module", torch::nn::Linear(2, 2));
  EXPECT_EQ(loadCheckpoint(dir + "/plain.pt", *wrapped.ptr(), nullptr), 3);
  EXPECT_TRUE(torch::equal(wrapped->parameters()[0], model->weight));

  torch::nn::Linear other(2, 3);
  try {
    loadCheckpoint(dir + "/plain.pt", *other.ptr(), nullptr);
    FAIL() << "a shape mismatch was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'weight' has shape 2x2 but the model expects 3x2"),
              std::string::npos)
        << e.what();
  }
  torch::nn::Sequential unrelated(torch::nn::Linear(2, 2));
  EXPECT_THROW(loadCheckpoint(dir + "/plain.pt", *unrelated.ptr(), nullptr), ConfigError);
  EXPECT_THROW(loadCheckpoint(dir + "/missing.pt", *model.ptr(), nullptr), ConfigError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::worker
