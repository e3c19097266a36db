// worker_bench: the C++ side of bench/distributed_bench.py. Run under
// ddprun (one process per rank); rank 0 prints one JSON object per result.
//
//   worker_bench allreduce [--sizes 4,1024,...] : Gloo all_reduce latency
//   worker_bench ddp --strategy overlap|simple|nosync [--steps N]
//       : CPU step time of a ~6.5M-parameter MLP under DistributedDataParallel
//
// bench/worker_bench.py does the same with Python torch.distributed.
#include <fmt/format.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/process_group.h"

namespace dw = ddprun::worker;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The iteration counts bench/worker_bench.py uses too.
int iterationsFor(std::int64_t bytes) {
  if (bytes <= (256 << 10)) return 200;
  if (bytes <= (4 << 20)) return 50;
  if (bytes <= (25 << 20)) return 10;
  return 5;
}

void allReduce(dw::ProcessGroup& group, const std::vector<std::int64_t>& sizes) {
  for (const auto bytes : sizes) {
    auto tensor = torch::ones({std::max<std::int64_t>(1, bytes / 4)}, torch::kFloat);
    for (int i = 0; i < 3; ++i) group.allReduce(tensor);  // warm-up
    std::vector<double> times;
    for (int i = 0; i < iterationsFor(bytes); ++i) {
      const auto start = Clock::now();
      group.allReduce(tensor);
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (group.rank() == 0) {
      std::cout << fmt::format(R"({{"kind": "allreduce", "bytes": {}, "seconds": {:.9f}}})", bytes,
                               median(times))
                << std::endl;
    }
  }
}

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(1024, 2048))),
        fc2(register_module("fc2", torch::nn::Linear(2048, 2048))),
        fc3(register_module("fc3", torch::nn::Linear(2048, 100))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

void ddpSteps(std::shared_ptr<dw::ProcessGroup> group, const std::string& strategy, int steps,
              int batch, double bucketMiB) {
  torch::manual_seed(0);
  Mlp model;
  dw::DdpOptions options;
  options.sync = strategy == "simple" ? dw::GradientSync::kSimple : dw::GradientSync::kOverlap;
  options.bucketBytes = static_cast<std::size_t>(bucketMiB * (1 << 20));
  dw::DistributedDataParallel ddp(model.ptr(), group, options);
  torch::optim::SGD sgd(model->parameters(), 0.01);
  auto x = torch::randn({batch, 1024});
  auto y = torch::randint(100, {batch}, torch::kLong);
  std::vector<double> times;
  std::vector<double> exposed;
  for (int step = 0; step < steps + 5; ++step) {
    const auto start = Clock::now();
    sgd.zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    if (strategy == "nosync") {
      auto guard = ddp.noSync();
      loss.backward();
    } else {
      loss.backward();
    }
    sgd.step();
    if (step < 5) continue;  // warm-up
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    exposed.push_back(strategy == "nosync" ? 0 : ddp.lastStepStats().exposedCommSeconds);
  }
  // A rank that finishes backward first also waits for its slower peer;
  // the rank that finished last waited only for the communication left over.
  // Per step, keep the smallest wait over ranks.
  auto waits = torch::tensor(exposed, torch::kDouble);
  auto all = group->allGather(waits);
  auto leftover = std::get<0>(all.min(0));
  exposed.assign(leftover.data_ptr<double>(), leftover.data_ptr<double>() + leftover.numel());
  // The communication of one step without compute: the buckets all-reduced
  // back to back, as the end of backward would if nothing had overlapped.
  std::vector<torch::Tensor> buckets;
  for (auto bytes : ddp.bucketBytes()) {
    buckets.push_back(torch::zeros({static_cast<std::int64_t>(bytes / 4)}));
  }
  std::vector<double> comm;
  for (int i = 0; i < 7; ++i) {
    const auto start = Clock::now();
    std::vector<std::shared_ptr<dw::Work>> works;
    for (auto& bucket : buckets) works.push_back(group->allReduceAsync(bucket));
    for (auto& work : works) work->wait();
    comm.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  if (group->rank() == 0) {
    std::cout << fmt::format(
                     R"({{"kind": "ddp", "strategy": "{}", "parameters": {}, "buckets": {}, )"
                     R"("seconds": {:.9f}, "exposed_seconds": {:.9f}, "comm_seconds": {:.9f}}})",
                     strategy, parameters, ddp.bucketCount(), median(times), median(exposed),
                     median(comm))
              << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"worker_bench: ddprun::worker collectives and DDP timings"};
  app.require_subcommand(1);
  std::vector<std::int64_t> sizes = {4,       64,       1 << 10,  16 << 10, 256 << 10, 1 << 20,
                                     4 << 20, 16 << 20, 25 << 20, 64 << 20, 100 << 20};
  auto* allreduce = app.add_subcommand("allreduce", "Gloo all_reduce latency per size");
  allreduce->add_option("--sizes", sizes, "message sizes in bytes")->delimiter(',');
  std::string strategy = "overlap";
  int steps = 20;
  int batch = 64;
  double bucketMiB = 25;
  auto* ddp = app.add_subcommand("ddp", "DDP step time of a ~6.5M-parameter MLP");
  ddp->add_option("--strategy", strategy)->check(CLI::IsMember({"overlap", "simple", "nosync"}));
  ddp->add_option("--steps", steps)->check(CLI::PositiveNumber);
  ddp->add_option("--batch", batch, "samples per rank")->check(CLI::PositiveNumber);
  ddp->add_option("--bucket_mb", bucketMiB, "bucket size in MiB")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  auto group = dw::initProcessGroup({dw::Backend::kGloo, std::chrono::minutes(5)});
  if (*allreduce) allReduce(*group, sizes);
  if (*ddp) ddpSteps(group, strategy, steps, batch, bucketMiB);
  return 0;
}
