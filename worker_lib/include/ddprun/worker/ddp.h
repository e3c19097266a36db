// DistributedDataParallel: data-parallel training of a torch::nn::Module.
//
// At construction rank 0's parameters and buffers are broadcast to every
// rank. During loss.backward() each parameter's gradient is copied into a
// bucket as soon as autograd has accumulated it; a full bucket is averaged
// across ranks (each gradient is divided by the world size as it enters
// the bucket, the bucket is summed) while backward keeps running (kOverlap),
// buckets being launched in the same order on every rank. When backward
// returns, every parameter's .grad() holds the average over ranks, so the
// optimizer step is the usual one. As in PyTorch, a bucket closes once it
// holds 25 MiB (the first one: 1 MiB), so the first bucket fills early and
// communication starts while most of backward is still to run.
//
// kSimple is NequIP's SimpleDDPStrategy: one flat all-reduce of every
// gradient after the complete backward pass. Both strategies give the same
// parameters (up to float rounding) as one process with the global batch.
//
// A parameter that gets no gradient in a step on some rank (an unused
// branch) contributes its current .grad(), or zeros, so ranks never disagree
// on sizes and never wait for each other forever.
//
// Example:
//   auto model = std::make_shared<Net>();
//   ddprun::worker::DistributedDataParallel ddp(model, group);
//   for (...) {
//     optimizer.zero_grad();
//     { auto guard = ddp.noSync(); lossOf(micro1).backward(); }  // accumulate
//     lossOf(micro2).backward();                                  // synchronises
//     optimizer.step();
//   }
//
// Thread-safety: one training loop per instance. The module must outlive
// it and keep its parameters (do not add or replace parameters after).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace torch::nn {
class Module;
}

namespace ddprun::worker {

class ProcessGroup;

enum class GradientSync { kOverlap, kSimple };

struct DdpOptions {
  GradientSync sync = GradientSync::kOverlap;
  std::size_t bucketBytes = std::size_t{25} << 20;
  std::size_t firstBucketBytes = std::size_t{1} << 20;
};

// What the last synchronised backward pass did.
struct DdpStepStats {
  int buckets = 0;
  // Buckets whose all-reduce started before backward finished.
  int bucketsLaunchedDuringBackward = 0;
  // Time backward's end waited for communication (not hidden by overlap).
  double exposedCommSeconds = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<ProcessGroup> group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  // While the returned guard lives, backward passes only accumulate local
  // gradients (gradient accumulation); the next synchronised backward
  // averages the accumulated .grad() across ranks.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard noSync() { return NoSyncGuard(*this); }

  // Copies rank 0's buffers (e.g. batch-norm statistics) to every rank.
  void broadcastBuffers();

  DdpStepStats lastStepStats() const;
  int bucketCount() const;
  // The size of each bucket in bytes, in launch order.
  std::vector<std::size_t> bucketBytes() const;

 private:
  class Reducer;

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace ddprun::worker
