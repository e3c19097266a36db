// DistributedDataParallel: data-parallel training of a torch::nn::Module
// on LibTorch's own c10d::Reducer, the engine behind Python's
// torch.nn.parallel.DistributedDataParallel.
//
// At construction the ranks check that their parameters agree in number,
// shapes and dtypes (c10d's verify_params_across_processes names the first
// mismatch), and rank 0's parameters and buffers are broadcast to every
// rank. During loss.backward() the Reducer's autograd hooks copy each
// gradient into its bucket as soon as it is accumulated and all-reduce a
// full bucket (averaged over ranks) while backward keeps running; when
// backward returns every parameter's .grad() holds the average, so the
// optimizer step is the usual one. As in Python: buckets of 25 MiB (the
// first 1 MiB) in reverse parameter order, rebuilt once after the first
// step in the order gradients arrived; find_unused_parameters,
// static_graph, gradient_as_bucket_view and the built-in comm hooks
// (allreduce, fp16 compression); an error in one step (a timeout, a
// vanished peer) is raised by that backward() and the next backward raises
// PyTorch's "Expected to have finished reduction in the prior iteration"
// instead of continuing without synchronisation.
//
// kSimple is NequIP's SimpleDDPStrategy: every gradient in one bucket,
// all-reduced after the complete backward pass. Both strategies give the
// same parameters (up to float rounding) as one process with the global
// batch.
//
// With findUnusedParameters a parameter that gets no gradient in a step on
// some rank is handled as PyTorch does (a parameter unused on every rank
// keeps its .grad() untouched); call markForwardOutputs(outputs) after each
// forward so the Reducer can find them. Without it, such a parameter makes
// the next step raise PyTorch's error that names it.
//
// Ranks with different numbers of batches: see join.h.
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

#include <cstddef>
#include <memory>
#include <vector>

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}

namespace ddprun::worker {

class ProcessGroup;
class Join;
struct JoinOptions;

enum class GradientSync { kOverlap, kSimple };
// c10d's built-in communication hooks (register_comm_hook in Python).
enum class CommHook { kNone, kAllReduce, kFp16Compress };

struct DdpOptions {
  GradientSync sync = GradientSync::kOverlap;
  std::size_t bucketBytes = std::size_t{25} << 20;
  std::size_t firstBucketBytes = std::size_t{1} << 20;
  bool findUnusedParameters = false;
  bool staticGraph = false;
  bool gradientAsBucketView = false;
  CommHook commHook = CommHook::kNone;
};

// What the last synchronised backward pass did.
struct DdpStepStats {
  int buckets = 0;
  // Time from the last gradient's arrival to the end of the Reducer's
  // finalisation: the communication overlap did not hide.
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

  // With findUnusedParameters: the forward pass's outputs (the loss will
  // do), from which the Reducer finds the parameters this step does not
  // use. Call it after each synchronised forward, before backward.
  void markForwardOutputs(const std::vector<at::Tensor>& outputs);

  // Zeroes every parameter's gradient the way Python's zero_grad() does, so
  // that it also works with gradientAsBucketView, where gradients are views
  // of the buckets (LibTorch 1.13's Optimizer::zero_grad() detaches them in
  // place, which a view cannot take).
  void zeroGrad();

  // Copies rank 0's buffers (e.g. batch-norm statistics) to every rank.
  void broadcastBuffers();

  DdpStepStats lastStepStats() const;
  int bucketCount() const;
  // The size of each bucket in bytes, in launch order.
  std::vector<std::size_t> bucketBytes() const;

 private:
  friend class Join;
  class Reducer;

  // For Join (join.h): announce each synchronised pass to the joined ranks;
  // answer one pass of the others with zeros; take the last joiner's model.
  void beginJoin(const JoinOptions& options);
  void endJoin();
  void shadowStep();
  void syncFinalModel(bool lastJoiner);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace ddprun::worker
