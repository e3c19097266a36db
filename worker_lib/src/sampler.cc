#include "ddprun/worker/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <numeric>

#include "ddprun/common/error.h"

namespace ddprun::worker {

namespace {

using Tail = SamplerOptions::Tail;

// The permutation Python's torch.randperm(n, generator=g) gives after
// g.manual_seed(seed): the same generator and kernel.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  const auto* data = perm.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(data, data + n);
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t datasetSize, int numReplicas, int rank,
                                       SamplerOptions options)
    : datasetSize_(datasetSize), numReplicas_(numReplicas), rank_(rank), options_(options) {
  if (numReplicas < 1 || rank < 0 || rank >= numReplicas) {
    throw ConfigError(
        fmt::format("DistributedSampler: rank {} is not in [0, {}); pass the group's rank and size",
                    rank, numReplicas));
  }
  if (datasetSize < 0) throw ConfigError("DistributedSampler: the dataset size is negative");
}

std::int64_t DistributedSampler::size() const {
  const std::int64_t n = datasetSize_;
  const std::int64_t r = numReplicas_;
  switch (options_.tail) {
    case Tail::kPad:
      return (n + r - 1) / r;
    case Tail::kDropLast:
      return n / r;
    case Tail::kExact:
      return n / r + (rank_ < n % r ? 1 : 0);
  }
  return 0;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> all;
  if (options_.shuffle) {
    all = permutation(datasetSize_, options_.seed + epoch_);
  } else {
    all.resize(static_cast<std::size_t>(datasetSize_));
    std::iota(all.begin(), all.end(), 0);
  }
  if (options_.tail != Tail::kExact) {
    const std::int64_t total = size() * numReplicas_;
    if (total > datasetSize_ && datasetSize_ > 0) {
      // Repeat from the start, as often as needed (PyTorch's padding).
      for (std::int64_t i = 0; static_cast<std::int64_t>(all.size()) < total; ++i) {
        all.push_back(all[static_cast<std::size_t>(i % datasetSize_)]);
      }
    }
    all.resize(static_cast<std::size_t>(total));
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(size()));
  for (std::size_t i = static_cast<std::size_t>(rank_); i < all.size();
       i += static_cast<std::size_t>(numReplicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace ddprun::worker
