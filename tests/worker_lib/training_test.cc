// The sampler (against PyTorch 1.13's DistributedSampler output), metrics,
// the early-stop decision and checkpoints.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "child_process.h"
#include "ddprun/common/error.h"
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/spawn.h"
#include "ddprun/worker/training.h"
#include "require.h"
#include "scratch_folder.h"

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

TEST(Checkpoint, RoundTripsModelOptimizerAndStepAtomically) {
  const std::string dir = harness::scratch().string();
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
    adam.param_groups()[0].options().set_lr(0.005);  // as a scheduler would
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
    require(freshAdam.param_groups()[0].options().get_lr() == 0.005,
            "the learning rate the run had reached");
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
  const std::string dir = harness::scratch().string();
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

// Runs the Python whose PyTorch matches the linked LibTorch (Debian's 1.13
// or the environment's current one) on `script`; returns its stdout, or
// fails the test with its output.
std::string runPython(const std::string& script) {
  harness::ChildProcess python({DDPRUN_TORCH_PYTHON, "-c", script});
  const auto code = python.wait(120s);
  const std::string out = python.stdoutText();
  EXPECT_TRUE(code.has_value() && *code == 0) << out << python.stderrText();
  return out;
}

bool pythonTorchAvailable() {
  harness::ChildProcess python({DDPRUN_TORCH_PYTHON, "-c", "import torch"});
  const auto code = python.wait(120s);
  return code.has_value() && *code == 0;
}

// The parameters equal the list of tensors Python saved at `path` (after
// taking the same optimizer step).
void expectSameParameters(const std::vector<at::Tensor>& parameters, const std::string& path) {
  const auto after = torch::jit::pickle_load([&] {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }());
  const auto expected = after.toList();
  ASSERT_EQ(expected.size(), parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(parameters[i], expected.get(i).toTensor(), 1e-5, 1e-6))
        << i << ": " << parameters[i] << " vs " << expected.get(i).toTensor();
  }
}

TEST(Checkpoint, PythonReadsItAsAStateDict) {
  ASSERT_TRUE(pythonTorchAvailable())
      << DDPRUN_TORCH_PYTHON << " cannot import torch: scripts/setup installs it";
  const std::string dir = harness::scratch().string();
  const std::string path = dir + "/cpp.pt";
  torch::manual_seed(3);
  auto model = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01).amsgrad(true));
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    model->forward(torch::randn({8, 3})).sum().backward();
    adam.step();
  }
  writeCheckpoint(path, *model.ptr(), &adam, 42);
  // Python loads it into the same model and optimizer, and both take the
  // same next step from the same batch.
  const std::string out = runPython(fmt::format(R"(
import torch
d = torch.load("{}")
assert sorted(d) == ["model", "optimizer", "step"], sorted(d)
m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
m.load_state_dict(d["model"])
o = torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True)
o.load_state_dict(d["optimizer"])
torch.manual_seed(11)
o.zero_grad(); m(torch.randn(8, 3)).sum().backward(); o.step()
print(d["step"], " ".join("%.9g" % p.double().sum().item() for p in m.parameters()))
)",
                                                path));
  torch::manual_seed(11);
  adam.zero_grad();
  model->forward(torch::randn({8, 3})).sum().backward();
  adam.step();
  std::istringstream words(out);
  int step = 0;
  words >> step;
  EXPECT_EQ(step, 42) << out;
  for (const auto& parameter : model->parameters()) {
    double pythonSum = 0;
    words >> pythonSum;
    EXPECT_NEAR(pythonSum, parameter.to(torch::kDouble).sum().item<double>(), 1e-5) << out;
  }
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, APythonStateDictLoadsInCpp) {
  ASSERT_TRUE(pythonTorchAvailable())
      << DDPRUN_TORCH_PYTHON << " cannot import torch: scripts/setup installs it";
  const std::string dir = harness::scratch().string();
  // A plain model.state_dict(), and a DDP-style {"model", "optimizer",
  // "step"} whose names carry "module.".
  runPython(fmt::format(R"(
import torch
m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
with torch.no_grad():
    for i, p in enumerate(m.parameters()):
        p.copy_(torch.arange(p.numel(), dtype=torch.float32).view_as(p) / 10 + i)
    m[1].running_mean.fill_(0.5)
torch.save(dict(m.state_dict()), "{0}/plain.pt")
torch.save(m.state_dict(), "{0}/ordered.pt")
o = torch.optim.Adam(m.parameters(), lr=0.1)
o.zero_grad(); m(torch.ones(5, 3)).sum().backward(); o.step()
sd = {{"module." + k: v for k, v in m.state_dict().items()}}
torch.save({{"model": sd, "optimizer": o.state_dict(), "step": 7}}, "{0}/wrapped.pt")
o.zero_grad(); m(torch.ones(5, 3)).sum().backward(); o.step()
torch.save([p.detach() for p in m.parameters()], "{0}/after.pt")
)",
                        dir));
  auto model = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  EXPECT_EQ(loadCheckpoint(dir + "/plain.pt", *model.ptr(), nullptr), 0);
  const auto parameters = model->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const auto& p = parameters[i];
    EXPECT_TRUE(torch::allclose(
        p, torch::arange(p.numel(), torch::kFloat).view_as(p) / 10 + static_cast<double>(i)));
  }
  EXPECT_TRUE(torch::equal(model->buffers()[0], torch::full({4}, 0.5)));
  // model.state_dict() itself, an OrderedDict (which LibTorch's own
  // unpickler reads as None): the same tensors.
  auto ordered = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  EXPECT_EQ(loadCheckpoint(dir + "/ordered.pt", *ordered.ptr(), nullptr), 0);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(torch::equal(ordered->parameters()[i], parameters[i])) << i;
  }
  EXPECT_TRUE(torch::equal(ordered->buffers()[0], torch::full({4}, 0.5)));

  torch::optim::Adam adam(model->parameters(), 0.1);
  EXPECT_EQ(loadCheckpoint(dir + "/wrapped.pt", *model.ptr(), &adam), 7);
  // Adam's moments and step count came across: the same next step from the
  // same batch lands where Python's did.
  adam.zero_grad();
  model->forward(torch::ones({5, 3})).sum().backward();
  adam.step();
  expectSameParameters(parameters, dir + "/after.pt");
  std::filesystem::remove_all(dir);
}

// A Lightning-style checkpoint written by this PyTorch: the state_dict under
// "state_dict" with the LightningModule's attribute as a prefix, views that
// share a storage, a parameter with a storage offset, several dtypes,
// hyperparameters of Python types the reader keeps without running them,
// the optimizer under "optimizer_states", the step under "global_step".
TEST(Checkpoint, ALightningStyleCheckpointOfThisPyTorchLoads) {
  ASSERT_TRUE(pythonTorchAvailable())
      << DDPRUN_TORCH_PYTHON << " cannot import torch: scripts/setup installs it";
  const std::string dir = harness::scratch().string();
  runPython(fmt::format(R"(
import collections, pathlib, argparse, torch
torch.manual_seed(5)
m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
o = torch.optim.Adam(m.parameters(), lr=0.05)
for _ in range(2):
    o.zero_grad(); m(torch.randn(8, 4)).sum().backward(); o.step()
sd = collections.OrderedDict(("model." + k, v) for k, v in m.state_dict().items())
big = torch.arange(40, dtype=torch.float64)
extra = {{"view": big[10:20], "t": big.view(5, 8).t(), "half": torch.ones(3, dtype=torch.float16),
         "flags": torch.tensor([True, False])}}
torch.save({{"epoch": 1, "global_step": 12, "pytorch-lightning_version": "2.6.6",
            "state_dict": sd, "loops": {{"fit_loop": {{"state_dict": {{}}}}}},
            "callbacks": {{"ModelCheckpoint{{'monitor': 'val_loss'}}": {{"best_model_score": torch.tensor(0.5)}}}},
            "optimizer_states": [o.state_dict()], "lr_schedulers": [],
            "hparams_name": "kwargs",
            "hyper_parameters": {{"lr": 0.05, "path": pathlib.Path("/data"), "ns": argparse.Namespace(a=1),
                                 "tup": (1, "a"), "st": {{1, 2}}, "big": 2**70, "neg": -5, "raw": b"\x00\xff"}},
            "extra": extra}}, "{0}/lightning.ckpt")
o.zero_grad(); m(torch.ones(2, 4)).sum().backward(); o.step()
torch.save([p.detach() for p in m.parameters()], "{0}/after.pt")
)",
                        dir));
  auto model = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                                     torch::nn::Linear(3, 1));
  torch::optim::Adam adam(model->parameters(), 0.05);
  EXPECT_EQ(loadCheckpoint(dir + "/lightning.ckpt", *model.ptr(), &adam), 12);
  adam.zero_grad();
  model->forward(torch::ones({2, 4})).sum().backward();
  adam.step();
  expectSameParameters(model->parameters(), dir + "/after.pt");
  std::filesystem::remove_all(dir);
}

// What make_lightning_checkpoints.py printed for each file.
const std::map<std::string, double> kLightningParameterSums = {
    {"lightning_plain.ckpt", 4.566850699484348},
    {"lightning_exotic_hparams.ckpt", 4.566850699484348},
};

// Real Lightning 2.6.6 checkpoints (Trainer.save_checkpoint after two
// epochs, PyTorch 2.13; tests/worker_lib/data/make_lightning_checkpoints.py
// wrote them), one with exotic hyperparameters (numpy, pathlib, argparse,
// a set, bytes, a torch dtype and device, a 2**40 int), load under every
// LibTorch we build against.
TEST(Checkpoint, RealLightningCheckpointsLoad) {
  for (const char* name : {"lightning_plain.ckpt", "lightning_exotic_hparams.ckpt"}) {
    SCOPED_TRACE(name);
    auto model = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                                       torch::nn::Linear(3, 1));
    torch::optim::Adam adam(model->parameters(), 0.1);
    const std::string path = std::string(DDPRUN_TEST_DATA_DIR) + "/" + name;
    EXPECT_EQ(loadCheckpoint(path, *model.ptr(), &adam), 4);  // 2 epochs of 2 batches
    // What torch.load(path)["state_dict"] held (printed by the generator).
    double sum = 0;
    for (const auto& p : model->parameters()) sum += p.to(torch::kDouble).sum().item<double>();
    EXPECT_NEAR(sum, kLightningParameterSums.at(name), 1e-6);
    EXPECT_EQ(model->named_buffers()["1.num_batches_tracked"].item<int64_t>(), 4);
  }
}

// A damaged file is a ConfigError naming it, never a crash or another
// exception: the real Lightning checkpoint cut short at many lengths and
// with bytes flipped all along it, and files that are not archives.
TEST(Checkpoint, DamagedFilesAreClearErrors) {
  const std::string dir = harness::scratch().string();
  std::ifstream in(std::string(DDPRUN_TEST_DATA_DIR) + "/lightning_plain.ckpt", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  const std::string path = dir + "/damaged.ckpt";
  const auto outcome = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto model = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                                       torch::nn::Linear(3, 1));
    try {
      loadCheckpoint(path, *model.ptr(), nullptr);
      return std::string("loaded");
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      return std::string("ConfigError");
    } catch (const std::exception& e) {
      return std::string("other exception: ") + e.what();
    }
  };
  int errors = 0;
  for (std::size_t length = 0; length < good.size(); length += 97) {
    const std::string result = outcome(good.substr(0, length));
    EXPECT_EQ(result, "ConfigError") << "cut at " << length;
    errors += result == "ConfigError";
  }
  for (std::size_t at = 0; at < good.size(); at += 13) {
    std::string bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x5A);
    const std::string result = outcome(bytes);
    EXPECT_TRUE(result == "loaded" || result == "ConfigError")
        << "flip at " << at << ": " << result;
  }
  EXPECT_EQ(outcome("not a checkpoint"), "ConfigError");
  EXPECT_EQ(outcome(std::string("PK\x03\x04", 4) + std::string(100, '\0')), "ConfigError");
  EXPECT_GT(errors, 50);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, AFailedSaveReachesEveryRankAndLeavesNoTemporary) {
  const std::string dir = harness::scratch().string() + "/failed-save";
  std::filesystem::create_directories(dir);
  // The checkpoint's directory would have to be a regular file.
  std::ofstream(dir + "/blocker") << "x";
  spawn(2, [&](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    torch::nn::Linear model(2, 2);
    try {
      saveCheckpoint(*group, dir + "/blocker/ckpt.pt", *model.ptr(), nullptr, 1);
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      require(what.find("blocker/ckpt.pt") != std::string::npos, what);
      if (rank == 1) require(what.find("rank 0 could not save") != std::string::npos, what);
      return;
    }
    throw Error("saveCheckpoint returned although rank 0 could not write");
  });
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename(), "blocker") << "left behind: " << entry.path();
  }
  std::filesystem::remove_all(dir);
}

// Rank 1 sees no file at its path (no shared file system): it resumes from
// rank 0's checkpoint anyway, at rank 0's step.
TEST(Checkpoint, RankZeroDecidesTheResumeForEveryRank) {
  const std::string dir = harness::scratch().string();
  torch::manual_seed(4);
  torch::nn::Linear saved(3, 2);
  writeCheckpoint(dir + "/rank0.pt", *saved.ptr(), nullptr, 17);
  spawn(2, [&](int rank) {
    auto group = initProcessGroup({Backend::kGloo, 30s});
    torch::manual_seed(100 + rank);
    torch::nn::Linear model(3, 2);
    const std::string path = dir + (rank == 0 ? "/rank0.pt" : "/not-on-this-host.pt");
    const auto step = resumeCheckpoint(*group, path, *model.ptr(), nullptr);
    require(step == 17, "every rank resumes at rank 0's step");
    require(torch::equal(model->weight, saved->weight), "with rank 0's parameters");
    const auto none = resumeCheckpoint(*group, dir + "/absent.pt", *model.ptr(), nullptr);
    require(!none.has_value(), "no checkpoint on rank 0: nobody resumes");
  });
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::worker
