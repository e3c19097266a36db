#include "ddprun/worker/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

namespace {

using Clock = std::chrono::steady_clock;

// Copies rank 0's tensors to every rank: one broadcast per dtype.
void broadcastFromRankZero(ProcessGroup& group, const std::vector<at::Tensor>& tensors) {
  torch::NoGradGuard noGrad;
  std::map<at::ScalarType, std::vector<at::Tensor>> byType;
  for (const auto& t : tensors) byType[t.scalar_type()].push_back(t);
  for (auto& [type, group_tensors] : byType) {
    std::vector<at::Tensor> flat;
    for (const auto& t : group_tensors) flat.push_back(t.reshape(-1));
    at::Tensor coalesced = at::cat(flat);
    group.broadcast(coalesced, 0);
    std::int64_t offset = 0;
    for (auto& t : group_tensors) {
      t.copy_(coalesced.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace

// Owns the buckets and the autograd hooks of one DistributedDataParallel.
class DistributedDataParallel::Reducer {
 public:
  Reducer(std::vector<at::Tensor> parameters, ProcessGroup& group, DdpOptions options)
      : group_(group), options_(options) {
    assignBuckets(std::move(parameters));
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(slots_[i].parameter);
      const auto key = accumulator->add_post_hook(std::make_unique<ReadyHook>(*this, i));
      hooks_.push_back({accumulator, key});
    }
  }

  ~Reducer() {
    for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
  }

  std::atomic<bool> enabled{true};

  DdpStepStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  int bucketCount() const { return static_cast<int>(buckets_.size()); }
  std::vector<std::size_t> bucketBytes() const {
    std::vector<std::size_t> bytes;
    for (const auto& bucket : buckets_) bytes.push_back(bucket.flat.nbytes());
    return bytes;
  }

 private:
  struct Slot {
    at::Tensor parameter;
    // The parameter's place in its bucket (aliases the bucket's storage).
    at::Tensor gradient;
    std::size_t bucket = 0;
    std::int64_t offset = 0;
    bool ready = false;
  };
  struct Bucket {
    at::Tensor flat;
    std::vector<std::size_t> slots;
    std::int64_t elements = 0;
    // 1 / world size as a 0-dim tensor of the bucket's dtype and device.
    at::Tensor scale;
    std::size_t pending = 0;
    std::shared_ptr<Work> work;
  };

  // Runs after AccumulateGrad has updated the parameter's .grad().
  class ReadyHook : public torch::autograd::FunctionPostHook {
   public:
    ReadyHook(Reducer& reducer, std::size_t slot) : reducer_(reducer), slot_(slot) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      reducer_.onGradientReady(slot_);
      return outputs;
    }

   private:
    Reducer& reducer_;
    std::size_t slot_;
  };

  // Reverse registration order approximates the order backward produces
  // gradients; a bucket never mixes dtypes or devices. As in PyTorch's
  // compute_bucket_assignment_by_size, a bucket closes once it reaches its
  // cap (the parameter that crosses it stays in), so the first bucket fills
  // early and its all-reduce overlaps the rest of backward.
  void assignBuckets(std::vector<at::Tensor> parameters) {
    using Kind = std::pair<at::ScalarType, std::string>;
    std::map<Kind, std::size_t> open;
    std::map<Kind, int> closed;
    for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
      const at::Tensor& p = *it;
      const Kind kind{p.scalar_type(), p.device().str()};
      auto found = open.find(kind);
      if (found == open.end()) {
        buckets_.emplace_back();
        found = open.emplace(kind, buckets_.size() - 1).first;
      }
      Bucket& bucket = buckets_[found->second];
      Slot slot;
      slot.parameter = p;
      slot.bucket = found->second;
      slot.offset = bucket.elements;
      bucket.elements += p.numel();
      bucket.slots.push_back(slots_.size());
      slots_.push_back(std::move(slot));
      if (options_.sync == GradientSync::kSimple) continue;  // one bucket per kind
      const std::size_t cap = closed[kind] == 0 ? options_.firstBucketBytes : options_.bucketBytes;
      const auto bytes = static_cast<std::size_t>(bucket.elements) * p.element_size();
      if (bytes >= cap) {
        open.erase(found);
        ++closed[kind];
      }
    }
    for (auto& bucket : buckets_) {
      const at::Tensor& first = slots_[bucket.slots.front()].parameter;
      bucket.flat = at::zeros({bucket.elements}, first.options());
      bucket.scale = at::scalar_tensor(1.0 / group_.size(), first.options());
      bucket.pending = bucket.slots.size();
      for (auto index : bucket.slots) {
        Slot& slot = slots_[index];
        slot.gradient = at::empty({0}, bucket.flat.options())
                            .set_(bucket.flat.storage(), slot.offset, slot.parameter.sizes(),
                                  slot.parameter.contiguous().strides());
      }
    }
  }

  void onGradientReady(std::size_t index) {
    std::lock_guard lock(mutex_);
    if (!enabled) return;
    if (!finalizeQueued_) {
      finalizeQueued_ = true;
      launchedDuringBackward_ = 0;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
    }
    Slot& slot = slots_[index];
    if (slot.ready) return;
    copyIn(slot);
    Bucket& bucket = buckets_[slot.bucket];
    if (--bucket.pending == 0 && options_.sync == GradientSync::kOverlap) {
      launchedDuringBackward_ += launchReady();
    }
  }

  // Puts the parameter's gradient, divided by the world size, into its
  // place in the bucket (unless autograd already accumulated it there, see
  // finalize()). Dividing here, as PyTorch's reducer does, fuses the
  // division into the copy and keeps it off the communication path: the
  // buckets are then summed.
  void copyIn(Slot& slot) {
    torch::NoGradGuard noGrad;
    const at::Tensor& grad = slot.parameter.grad();
    const at::Tensor& scale = buckets_[slot.bucket].scale;
    if (!grad.defined()) {
      slot.gradient.zero_();
    } else if (grad.data_ptr() != slot.gradient.data_ptr()) {
      at::mul_out(slot.gradient, grad, scale);
    } else {
      slot.gradient.mul_(scale);
    }
    slot.ready = true;
  }

  // Launches, in bucket order, every bucket whose gradients are all in.
  int launchReady() {
    int launched = 0;
    while (nextBucket_ < buckets_.size() && buckets_[nextBucket_].pending == 0) {
      Bucket& bucket = buckets_[nextBucket_++];
      bucket.work = group_.allReduceAsync(bucket.flat, ReduceOp::kSum);
      ++launched;
    }
    return launched;
  }

  // Queued into the autograd engine by the first hook of a backward pass;
  // runs when that pass has finished.
  void finalize() {
    std::lock_guard lock(mutex_);
    // Parameters that got no gradient this pass (unused on this rank).
    for (auto& slot : slots_) {
      if (slot.ready) continue;
      copyIn(slot);
      --buckets_[slot.bucket].pending;
    }
    launchReady();
    const auto start = Clock::now();
    for (auto& bucket : buckets_) bucket.work->wait();
    stats_.exposedCommSeconds = std::chrono::duration<double>(Clock::now() - start).count();
    stats_.buckets = static_cast<int>(buckets_.size());
    stats_.bucketsLaunchedDuringBackward = launchedDuringBackward_;
    // The averaged values are in the buckets. Each .grad() becomes (or
    // already is) its slot of the bucket, so no copy back, and the next
    // backward accumulates straight into the bucket (PyTorch's
    // gradient_as_bucket_view). The slot aliases the bucket's storage without
    // being an autograd view, so optimizers may detach_() and zero_() it.
    for (auto& slot : slots_) {
      const at::Tensor& grad = slot.parameter.grad();
      if (!grad.defined() || grad.data_ptr() != slot.gradient.data_ptr()) {
        slot.parameter.mutable_grad() = slot.gradient;
      }
      slot.ready = false;
    }
    for (auto& bucket : buckets_) {
      bucket.pending = bucket.slots.size();
      bucket.work.reset();
    }
    nextBucket_ = 0;
    finalizeQueued_ = false;
  }

  ProcessGroup& group_;
  DdpOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> hooks_;
  mutable std::mutex mutex_;
  std::size_t nextBucket_ = 0;
  bool finalizeQueued_ = false;
  int launchedDuringBackward_ = 0;
  DdpStepStats stats_;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)) {
  if (!module_ || !group_) throw ConfigError("DistributedDataParallel needs a module and a group");
  if (options.bucketBytes == 0 || options.firstBucketBytes == 0) {
    throw ConfigError("DistributedDataParallel: bucket sizes must be positive");
  }
  std::vector<at::Tensor> state = module_->parameters();
  for (const auto& buffer : module_->buffers()) state.push_back(buffer);
  if (!state.empty()) broadcastFromRankZero(*group_, state);
  std::vector<at::Tensor> trainable;
  for (const auto& p : module_->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (trainable.empty()) {
    throw ConfigError("DistributedDataParallel: the module has no parameter that requires grad");
  }
  reducer_ = std::make_unique<Reducer>(std::move(trainable), *group_, options);
}

DistributedDataParallel::~DistributedDataParallel() = default;

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->enabled) {
  ddp_.reducer_->enabled = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->enabled = previous_; }

void DistributedDataParallel::broadcastBuffers() {
  auto buffers = module_->buffers();
  if (!buffers.empty()) broadcastFromRankZero(*group_, buffers);
}

DdpStepStats DistributedDataParallel::lastStepStats() const { return reducer_->stats(); }

int DistributedDataParallel::bucketCount() const { return reducer_->bucketCount(); }

std::vector<std::size_t> DistributedDataParallel::bucketBytes() const {
  return reducer_->bucketBytes();
}

}  // namespace ddprun::worker
