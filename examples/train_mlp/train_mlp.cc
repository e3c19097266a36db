// train_mlp: a LibTorch MLP classifier trained data-parallel with
// ddprun::worker, on a dataset it generates deterministically (no
// downloads), on CPU (Gloo) or GPU (NCCL).
//
//   ddprun --standalone --nproc_per_node=2 build/bin/train_mlp --steps 300
//
// Rank 0 prints loss and accuracy (averaged over ranks) and, at the end, a
// checksum of the parameters. With --checkpoint_dir and --resume a restarted
// run (ddprun --max_restarts) continues from the last checkpoint and ends
// with the same checksum as an undisturbed run.
#include <fmt/format.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/process_group.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/training.h"

namespace dw = ddprun::worker;

namespace {

struct Options {
  int steps = 300;
  int batch = 64;  // per rank
  std::uint64_t seed = 0;
  std::string strategy = "overlap";
  std::string backend = "auto";
  std::string checkpointDir;
  int checkpointEvery = 50;
  bool resume = false;
  int logEvery = 25;
  double lr = 0.05;
  int hidden = 256;
  int samples = 16384;
  int features = 32;
  int classes = 8;
  int threads = 0;
};

// Gaussian blobs around fixed class centres, pushed through a fixed random
// non-linearity so that a linear model is not enough. Depends only on the
// data sizes, never on --seed or the number of ranks.
struct Dataset {
  torch::Tensor x, y;
};

Dataset makeDataset(const Options& o) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(20261122);
  auto centres = at::randn({o.classes, o.features}, generator) * 0.6;
  auto y = at::randint(o.classes, {o.samples}, generator, at::kLong);
  auto noise = at::randn({o.samples, o.features}, generator) * 1.2;
  auto mix = at::randn({o.features, o.features}, generator) / std::sqrt(o.features);
  auto x = torch::tanh((centres.index_select(0, y) + noise).matmul(mix)) * 2;
  return {x, y};
}

struct MlpImpl : torch::nn::Module {
  MlpImpl(int in, int hidden, int out)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, out))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

double checksum(torch::nn::Module& module) {
  double sum = 0;
  for (const auto& p : module.parameters())
    sum += p.detach().to(torch::kDouble).sum().item<double>();
  return sum;
}

int run(const Options& o) {
  const auto environment = dw::Environment::detect();
  torch::set_num_threads(o.threads > 0
                             ? o.threads
                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                               environment.localWorldSize));
  dw::ProcessGroupOptions groupOptions;
  groupOptions.backend = dw::parseBackend(o.backend);
  groupOptions.timeout = std::chrono::seconds(120);
  auto group = dw::initProcessGroup(environment, groupOptions);
  const torch::Device device(group->device());

  const Dataset data = makeDataset(o);
  torch::manual_seed(o.seed);
  Mlp model(o.features, o.hidden, o.classes);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));

  const std::string checkpoint = o.checkpointDir.empty() ? "" : o.checkpointDir + "/checkpoint.pt";
  std::int64_t step = 0;
  if (o.resume && !checkpoint.empty()) {
    // Rank 0 decides and sends the file: every rank resumes at one step.
    if (auto saved =
            dw::resumeCheckpoint(*group, checkpoint, *model, &optimizer, group->device())) {
      step = *saved;
      dw::printOnRankZero(*group, fmt::format("resumed from {} at step {}", checkpoint, step));
    }
  }
  dw::DdpOptions ddpOptions;
  ddpOptions.sync = o.strategy == "simple" ? dw::GradientSync::kSimple : dw::GradientSync::kOverlap;
  dw::DistributedDataParallel ddp(model.ptr(), group, ddpOptions);

  dw::DistributedSampler sampler(o.samples, group->size(), group->rank(), {true, o.seed});
  const std::int64_t stepsPerEpoch = std::max<std::int64_t>(1, sampler.size() / o.batch);
  dw::printOnRankZero(*group, fmt::format(
                                  "training on {} rank(s) ({}), {} parameters, batch {} "
                                  "per rank, {} steps, strategy {}",
                                  group->size(), dw::toString(group->backend()),
                                  [&] {
                                    std::int64_t n = 0;
                                    for (auto& p : model->parameters()) n += p.numel();
                                    return n;
                                  }(),
                                  o.batch, o.steps, o.strategy));
  std::int64_t epoch = -1;
  std::vector<std::int64_t> order;
  const auto start = std::chrono::steady_clock::now();
  for (; step < o.steps; ++step) {
    if (step / stepsPerEpoch != epoch) {
      epoch = step / stepsPerEpoch;
      sampler.setEpoch(static_cast<std::uint64_t>(epoch));
      order = sampler.indices();
    }
    const auto first = order.begin() + (step % stepsPerEpoch) * o.batch;
    auto index = torch::tensor(std::vector<std::int64_t>(first, first + o.batch), torch::kLong);
    auto x = data.x.index_select(0, index).to(device);
    auto y = data.y.index_select(0, index).to(device);
    optimizer.zero_grad();
    auto logits = model->forward(x);
    auto loss = torch::cross_entropy_loss(logits, y);
    loss.backward();
    optimizer.step();
    if (step == 0 || (step + 1) % o.logEvery == 0 || step + 1 == o.steps) {
      const double accuracy = logits.argmax(1).eq(y).to(torch::kDouble).mean().item<double>();
      const auto means = dw::meanOverRanks(*group, {loss.item<double>(), accuracy});
      dw::printOnRankZero(*group, fmt::format("step {}/{} loss {:.4f} acc {:.3f}", step + 1,
                                              o.steps, means[0], means[1]));
    }
    if (!checkpoint.empty() && (step + 1) % o.checkpointEvery == 0) {
      dw::saveCheckpoint(*group, checkpoint, *model, &optimizer, step + 1);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Exact evaluation: every sample once over all ranks.
  torch::NoGradGuard noGrad;
  dw::DistributedSampler evaluation(o.samples, group->size(), group->rank(),
                                    {false, 0, dw::SamplerOptions::Tail::kExact});
  const auto mine = evaluation.indices();
  auto index = torch::tensor(mine, torch::kLong);
  auto correct = model->forward(data.x.index_select(0, index).to(device))
                     .argmax(1)
                     .eq(data.y.index_select(0, index).to(device))
                     .sum()
                     .item<double>();
  const double accuracy =
      dw::weightedMeanOverRanks(*group, correct, static_cast<double>(mine.size()));
  dw::printOnRankZero(*group, fmt::format("evaluation accuracy {:.4f} on {} samples ({:.2f} s of "
                                          "training)",
                                          accuracy, o.samples, seconds));
  dw::printOnRankZero(*group, fmt::format("final checksum {:.17g}", checksum(*model)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_mlp: data-parallel MLP training with ddprun::worker"};
  Options o;
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "samples per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "model initialisation and shuffling seed");
  app.add_option("--strategy", o.strategy, "gradient synchronisation")
      ->check(CLI::IsMember({"overlap", "simple"}));
  app.add_option("--backend", o.backend, "process group backend")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--checkpoint_dir", o.checkpointDir, "directory for checkpoint.pt");
  app.add_option("--checkpoint_every", o.checkpointEvery, "steps between checkpoints")
      ->check(CLI::PositiveNumber);
  app.add_flag("--resume", o.resume, "continue from the checkpoint when one exists");
  app.add_option("--log_every", o.logEvery, "steps between loss lines")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--samples", o.samples, "dataset size")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "LibTorch threads per rank (0: cores / local ranks)");
  CLI11_PARSE(app, argc, argv);
  if (o.batch * 1LL > o.samples) {
    std::cerr << "train_mlp: --batch " << o.batch << " is larger than the dataset (" << o.samples
              << " samples); lower --batch or raise --samples\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "train_mlp: " << e.what() << "\n";
    return 1;
  }
}
