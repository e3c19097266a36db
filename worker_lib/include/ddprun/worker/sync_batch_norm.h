// SyncBatchNorm: batch normalisation whose batch statistics are those of
// the whole group's batch, as torch.nn.SyncBatchNorm (which LibTorch's C++
// API lacks, and which Python 1.13 offers for CUDA only). In training every
// forward all-gathers each rank's per-channel mean, variance and count (one
// all-gather) and merges them, and every backward all-reduces the two
// per-channel gradient sums (one all-reduce); eval is local batch norm with
// the running statistics.
// Parameters and buffers have BatchNorm's names (weight, bias,
// running_mean, running_var, num_batches_tracked), so state_dicts match
// Python's. Input: [N, C, *] for any number of trailing dimensions.
//
// Example:
//   auto group = ddprun::worker::initProcessGroup();
//   auto bn = register_module("bn", ddprun::worker::SyncBatchNorm(
//                                       torch::nn::BatchNormOptions(64), group));
//
// convertSyncBatchNorm(sequential, group) is Python's convert_sync_batchnorm
// for models built from torch::nn::Sequential (whose forward dispatches
// through its list, so a replaced entry is the one that runs).
//
// Thread-safety: one training thread, as any module; every rank of the
// group runs its forward and backward in the same order.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>

namespace ddprun::worker {

class ProcessGroup;

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(torch::nn::BatchNormOptions options, std::shared_ptr<ProcessGroup> group);

  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  torch::nn::BatchNormOptions options;
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor running_mean;
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  std::shared_ptr<ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm);

// A new Sequential in which every BatchNorm1d/2d/3d entry of `model` is a
// SyncBatchNorm over `group` with the same options,
// parameters, running statistics and training mode; the other entries are
// shared with `model`, as Python's convert_sync_batchnorm shares them.
// A BatchNorm inside any other module is a ConfigError naming its path: a
// C++ module calls its layers through typed members, which no converter can
// redirect (build such a module with SyncBatchNorm).
torch::nn::Sequential convertSyncBatchNorm(const torch::nn::Sequential& model,
                                           const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddprun::worker
