// DistributedSampler: which dataset indices this rank visits in an epoch,
// with PyTorch's partition rule (torch.utils.data.DistributedSampler):
//
//   indices = randperm(n, seed + epoch) if shuffle else 0..n-1
//   padding:   repeat indices from the start up to ceil(n / R) * R, or
//   drop_last: cut to floor(n / R) * R
//   this rank: indices[rank :: R]
//
// so a C++ and a Python job given the same seed see the same samples on the
// same ranks. kExact is for evaluation: every sample exactly once over all
// ranks (indices[rank :: R] of the unpadded list; ranks may differ in
// length by one), because the padding's duplicates inflate metrics.
//
// Example:
//   DistributedSampler sampler(dataset.size(), group->size(), group->rank(),
//                              {.seed = 42});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler.setEpoch(epoch);
//     for (auto index : sampler.indices()) ...
//   }
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <vector>

namespace ddprun::worker {

struct SamplerOptions {
  enum class Tail { kPad, kDropLast, kExact };
  bool shuffle = true;
  std::uint64_t seed = 0;
  Tail tail = Tail::kPad;
};

class DistributedSampler {
 public:
  // Throws ConfigError when rank is not in [0, numReplicas).
  DistributedSampler(std::int64_t datasetSize, int numReplicas, int rank,
                     SamplerOptions options = {});

  void setEpoch(std::uint64_t epoch) { epoch_ = epoch; }
  std::uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch.
  std::vector<std::int64_t> indices() const;
  // How many indices this rank gets per epoch.
  std::int64_t size() const;

 private:
  std::int64_t datasetSize_;
  int numReplicas_;
  int rank_;
  SamplerOptions options_;
  std::uint64_t epoch_ = 0;
};

}  // namespace ddprun::worker
