#include "ddprun/worker/ddp.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/worker/join.h"
#include "ddprun/worker/process_group.h"
#include "error_text.h"
#include "process_group_access.h"
#include "progress_report.h"

namespace ddprun::worker {

namespace {

// c10d::Reducer's constructor as this LibTorch has it. Up to about 2.10 it
// takes the per-bucket size limits after the bucket indices; later ones drop
// them and take, after the first bucket's cap, whether to skip all-reducing
// unused parameters, whether Python reduces, and per-bucket caps for the
// rebuild (Python's DDP passes false, false and an empty list by default).
// A template, so that only the branch this LibTorch has is compiled.
template <typename R = c10d::Reducer>
std::shared_ptr<R> makeReducer(const std::vector<at::Tensor>& parameters,
                               std::vector<std::vector<size_t>> indices, std::vector<size_t> limits,
                               const c10::intrusive_ptr<c10d::ProcessGroup>& group, int64_t cap,
                               bool findUnused, bool gradientAsBucketView, int64_t first) {
  std::vector<bool> sparse(parameters.size(), false);
  std::unordered_map<size_t, std::string> names;
  if constexpr (std::is_constructible_v<
                    R, std::vector<at::Tensor>, std::vector<std::vector<size_t>>,
                    c10::intrusive_ptr<c10d::ProcessGroup>, std::vector<bool>, int64_t, bool, bool,
                    std::unordered_map<size_t, std::string>, int64_t, bool, bool,
                    std::vector<int64_t>>) {
    (void)limits;
    return std::make_shared<R>(parameters, std::move(indices), group, std::move(sparse), cap,
                               findUnused, gradientAsBucketView, std::move(names), first,
                               /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false, std::vector<int64_t>{});
  } else {
    return std::make_shared<R>(parameters, std::move(indices), std::move(limits), group,
                               std::move(sparse), cap, findUnused, gradientAsBucketView,
                               std::move(names), first);
  }
}

using Clock = std::chrono::steady_clock;

// The root's tensors to every rank, one broadcast per dtype (Python's
// _sync_module_states does the same with _broadcast_coalesced).
void broadcastFrom(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root) {
  std::map<at::ScalarType, std::vector<at::Tensor>> byType;
  for (const auto& t : tensors) byType[t.scalar_type()].push_back(t);
  torch::NoGradGuard noGrad;
  for (auto& [type, sameType] : byType) {
    std::vector<at::Tensor> flat;
    for (const auto& t : sameType) flat.push_back(t.reshape(-1));
    at::Tensor coalesced = at::cat(flat).to(at::Device(group.device())).contiguous();
    group.broadcast(coalesced, root);
    std::int64_t offset = 0;
    for (auto& t : sameType) {
      const auto n = t.numel();
      t.copy_(coalesced.narrow(0, offset, n).view_as(t));
      offset += n;
    }
  }
}

// What a replica must share: its parameters, then its buffers.
std::vector<at::Tensor> moduleState(const torch::nn::Module& module) {
  std::vector<at::Tensor> state = module.parameters();
  for (const auto& buffer : module.buffers()) state.push_back(buffer);
  return state;
}

}  // namespace

// The c10d::Reducer and what the C++ API adds around it: the Reducer is
// prepared for each synchronised backward by a pre-hook on the parameters'
// gradient accumulators (Python's DDP does it in forward(), which a C++
// module does not route through us), and end-of-backward callbacks time the
// finalisation.
class DistributedDataParallel::Reducer {
 public:
  Reducer(std::vector<at::Tensor> parameters, ProcessGroup& group, const DdpOptions& options)
      : parameters_(std::move(parameters)), options_(options), group_(group) {
    auto c10dGroup = ProcessGroupAccess::processGroup(group);
    dispatcher_ = c10dGroup;
    // c10d's check may fire on some ranks only (each compares the others
    // with itself); the verdict is shared so every rank raises.
    std::string mismatch;
    try {
      c10d::verify_params_across_processes(c10dGroup, parameters_, c10::nullopt);
    } catch (const std::exception& e) {
      mismatch = messageOf(e);
    }
    const auto verdicts = group.allGatherBytes(mismatch);
    for (int r = 0; r < group.size(); ++r) {
      if (verdicts[r].empty()) continue;
      throw ConfigError(fmt::format(
          "DistributedDataParallel: the ranks' models differ (rank {} found): {} (every rank "
          "must build the same model before wrapping it)",
          r, verdicts[r]));
    }
    const bool simple = options.sync == GradientSync::kSimple;
    const std::size_t unlimited = std::numeric_limits<std::size_t>::max() / 2;
    const std::size_t first = simple ? unlimited : options.firstBucketBytes;
    const std::size_t cap = simple ? unlimited : options.bucketBytes;
    // As Python's DDP (1.13): one bucket for the first step when the
    // Reducer will rebuild the buckets after it (in the order gradients
    // arrived, capped at [first, cap]); else buckets assigned over the
    // parameters, reversed so the last layers fill the first bucket.
    const bool rebuilds = options.staticGraph || !options.findUnusedParameters;
    const std::vector<std::size_t> caps =
        rebuilds ? std::vector<std::size_t>{unlimited} : std::vector<std::size_t>{first, cap};
    auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
        parameters_, caps, std::vector<bool>(parameters_.size(), false));
    std::reverse(indices.begin(), indices.end());
    std::reverse(limits.begin(), limits.end());
    reducer_ = makeReducer(parameters_, std::move(indices), std::move(limits), c10dGroup,
                           static_cast<int64_t>(cap), options.findUnusedParameters,
                           options.gradientAsBucketView, static_cast<int64_t>(first));
    // The Reducer reports through a Logger and expects one (1.13 calls it
    // unchecked when it looks for unused parameters).
    logger_ = std::make_shared<c10d::Logger>(reducer_);
    reducer_->set_logger(logger_);
    logger_->set_construction_data_and_log("ddprun::worker::DistributedDataParallel", {}, -1,
                                           /*broadcast_buffers=*/true, /*has_sync_bn=*/false,
                                           options.staticGraph);
    if (options.staticGraph) {
      reducer_->set_static_graph();
      logger_->set_static_graph();
    }
    if (options.commHook == CommHook::kAllReduce) {
      reducer_->register_builtin_comm_hook(c10d::BuiltinCommHookType::ALLREDUCE);
    } else if (options.commHook == CommHook::kFp16Compress) {
      reducer_->register_builtin_comm_hook(c10d::BuiltinCommHookType::FP16_COMPRESS);
    }
    state_ = std::make_shared<State>();
    state_->owner = this;
    state_->arrived.assign(parameters_.size(), false);
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
      accumulator->add_pre_hook(std::make_unique<BackwardStarts>(state_, i));
    }
  }

  ~Reducer() {
    // The pre-hooks stay on the parameters; they fall silent.
    std::lock_guard lock(state_->mutex);
    state_->owner = nullptr;
  }

  bool enabled = true;

  // Python's DDP prepares the Reducer at the end of forward(): with
  // findUnusedParameters the outputs say which parameters this step uses.
  // A forward pass ended: whatever pass came before is over.
  void markForwardOutputs(const std::vector<at::Tensor>& outputs) {
    if (!enabled) return;
    {
      std::lock_guard lock(state_->mutex);
      state_->prepared = true;
      state_->inBackward = false;
    }
    try {
      announce(options_.findUnusedParameters && !options_.staticGraph ? outputs
                                                                      : std::vector<at::Tensor>{});
    } catch (...) {
      std::lock_guard lock(state_->mutex);
      state_->prepared = false;
      throw;
    }
  }

  DdpStepStats stats() const {
    std::lock_guard lock(state_->mutex);
    return stats_;
  }
  // Join (join.h): while set, every announced pass tells the joined ranks
  // that this one still trains.
  void beginJoin(const JoinOptions& options) {
    if (options_.staticGraph) {
      throw ConfigError(
          "Join: DistributedDataParallel with staticGraph cannot shadow uneven inputs (its first "
          "step's delayed reduction has no joined-rank counterpart); drop staticGraph");
    }
    if (join_) throw ConfigError("Join: this DistributedDataParallel already has a Join");
    join_ = options;
  }

  void endJoin() {
    if (!join_) return;
    join_.reset();
    // The Reducer divides by the group size again.
    reducer_->set_forward_pass_work_handle({}, /*useStaticWorldSize=*/true);
  }

  // One synchronised pass of the ranks still training, answered by a
  // joined rank in their order: the bucket rebuild, zero gradients bucket
  // by bucket through the Reducer's comm hook, a zero used-parameter map.
  void shadowStep() {
    const std::string what = "Join: shadowing another rank's training step";
    try {
      reducer_->rebuild_buckets();
      std::vector<c10::intrusive_ptr<c10::ivalue::Future>> pending;
      for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
        pending.push_back(reducer_->run_comm_hook(bucket));
      }
      for (auto& future : pending) {
        future->wait();
        if (future->hasError()) std::rethrow_exception(future->exception_ptr());
      }
    } catch (const std::exception& e) {
      rethrowCollectiveError(e, group_.rank(), group_.size(), what);
    }
    if (options_.findUnusedParameters) {
      at::Tensor unused = at::zeros_like(reducer_->get_local_used_map_on_device());
      group_.allReduce(unused);
    }
    reducer_->push_rebuilt_params_for_all_indices();
  }

  std::vector<std::size_t> bucketBytes() const {
    std::vector<std::size_t> bytes;
    for (const auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/false)) {
      bytes.push_back(
          static_cast<std::size_t>(bucket.getBuffer().numel() * bucket.getBuffer().element_size()));
    }
    return bytes;
  }

 private:
  struct State {
    std::mutex mutex;
    Reducer* owner = nullptr;
    bool prepared = false;    // the coming backward pass was announced to the Reducer
    bool inBackward = false;  // a synchronised backward pass is running
    // The parameters whose gradient arrived in this pass. A parameter
    // arriving twice means a new pass: how a pass that failed midway (and
    // never ran its end-of-backward callbacks) is told from the next one.
    std::vector<bool> arrived;
    std::size_t seen = 0;
  };

  // Runs before a parameter's gradient is accumulated: the first one of a
  // synchronised backward pass prepares the Reducer, as Python's DDP does
  // at the end of forward().
  class BackwardStarts : public torch::autograd::FunctionPreHook {
   public:
    BackwardStarts(std::shared_ptr<State> state, std::size_t index)
        : state_(std::move(state)), index_(index) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& grads) override {
      std::unique_lock lock(state_->mutex);
      if (state_->owner != nullptr) state_->owner->gradientArrives(lock, index_);
      return grads;
    }

   private:
    std::shared_ptr<State> state_;
    std::size_t index_;
  };

  // What Python's forward() does around the module, in its order.
  void announce(const std::vector<at::Tensor>& outputs) {
    reducer_->prepare_for_forward();
    if (join_) notifyJoined();
    reducer_->rebuild_buckets();
    reducer_->prepare_for_backward(outputs);
  }

  // Python's Join.notify_join_context: a one from every rank still training
  // (the joined ones add zero); the Reducer divides by the sum unless the
  // initial world size is kept.
  void notifyJoined() {
    std::vector<at::Tensor> one{at::ones({1}, at::TensorOptions().device(group_.device()))};
    reducer_->set_forward_pass_work_handle(dispatcher_->allreduce(one),
                                           join_->divideByInitialWorldSize);
    if (!join_->throwOnEarlyTermination) return;
    at::Tensor someoneFinished = at::zeros({1}, at::TensorOptions().device(group_.device()));
    group_.allReduce(someoneFinished);
    if (someoneFinished.item<double>() != 0) {
      throw Error(fmt::format(
          "rank {} of {}: another rank ran out of inputs and throwOnEarlyTermination is set: "
          "every rank stops here",
          group_.rank(), group_.size()));
    }
  }

  void gradientArrives(std::unique_lock<std::mutex>& lock, std::size_t index) {
    if (!enabled) return;
    if (!state_->inBackward || state_->arrived[index]) startPass(lock);
    state_->arrived[index] = true;
    if (++state_->seen == parameters_.size()) {
      // Every gradient arrived: time the wait for the Reducer's finalisation
      // (a callback queued from a callback runs after the Reducer's own).
      const auto lastGradient = Clock::now();
      torch::autograd::Engine::get_default_engine().queue_callback([this, state = state_,
                                                                    lastGradient] {
        torch::autograd::Engine::get_default_engine().queue_callback([this, state, lastGradient] {
          std::lock_guard inner(state->mutex);
          if (state->owner == nullptr) return;
          stats_.buckets =
              static_cast<int>(reducer_->get_grad_buckets(/*return_zero_tensors=*/false).size());
          stats_.exposedCommSeconds =
              std::chrono::duration<double>(Clock::now() - lastGradient).count();
          reportStep();
        });
      });
    }
  }

  // The first gradient of a synchronised backward pass. The flags are
  // cleared first, so a pass that fails here is not taken for a running one.
  void startPass(std::unique_lock<std::mutex>& lock) {
    const bool announced = state_->prepared;
    state_->prepared = false;
    state_->inBackward = false;
    state_->arrived.assign(parameters_.size(), false);
    state_->seen = 0;
    if (!announced && options_.findUnusedParameters && !options_.staticGraph) {
      throw ConfigError(
          "DistributedDataParallel with findUnusedParameters: call "
          "ddp.markForwardOutputs(outputs) after the forward pass, before backward");
    }
    const bool firstIteration = iterations_++ == 0;
    lock.unlock();
    if (!announced) announce({});
    auto& engine = torch::autograd::Engine::get_default_engine();
    if (options_.staticGraph && firstIteration) {
      engine.queue_callback([this, state = state_] {
        if (state->owner != nullptr) reducer_->delay_all_reduce();
      });
    }
    // At the end of backward this pass is over.
    engine.queue_callback([state = state_] {
      std::lock_guard inner(state->mutex);
      state->inBackward = false;
    });
    lock.lock();
    state_->inBackward = true;
  }

  std::vector<at::Tensor> parameters_;
  DdpOptions options_;
  ProcessGroup& group_;
  c10::intrusive_ptr<c10d::ProcessGroup> dispatcher_;
  std::optional<JoinOptions> join_;
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<c10d::Logger> logger_;
  std::shared_ptr<State> state_;
  std::int64_t iterations_ = 0;
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
  std::vector<at::Tensor> trainable;
  for (const auto& p : module_->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (trainable.empty()) {
    throw ConfigError("DistributedDataParallel: the module has no parameter that requires grad");
  }
  // The shape check runs first, so a mismatch is named instead of a
  // broadcast failing on it.
  reducer_ = std::make_unique<Reducer>(trainable, *group_, options);
  broadcastFrom(*group_, moduleState(*module_), 0);
}

DistributedDataParallel::~DistributedDataParallel() = default;

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->enabled) {
  ddp_.reducer_->enabled = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->enabled = previous_; }

void DistributedDataParallel::markForwardOutputs(const std::vector<at::Tensor>& outputs) {
  reducer_->markForwardOutputs(outputs);
}

void DistributedDataParallel::zeroGrad() {
  for (auto& parameter : module_->parameters()) {
    at::Tensor& grad = parameter.mutable_grad();
    if (!grad.defined()) continue;
    if (grad.grad_fn()) {
      grad = grad.detach();
    } else {
      grad.requires_grad_(false);
    }
    grad.zero_();
  }
}

void DistributedDataParallel::broadcastBuffers() {
  auto buffers = module_->buffers();
  if (!buffers.empty()) broadcastFrom(*group_, buffers, 0);
}

void DistributedDataParallel::beginJoin(const JoinOptions& options) {
  reducer_->beginJoin(options);
}

void DistributedDataParallel::endJoin() { reducer_->endJoin(); }

void DistributedDataParallel::shadowStep() { reducer_->shadowStep(); }

// Python's _sync_final_model: every rank takes the model of the last rank
// to join (the highest such rank).
void DistributedDataParallel::syncFinalModel(bool lastJoiner) {
  at::Tensor source = at::full({1}, lastJoiner ? group_->rank() : -1,
                               at::TensorOptions().dtype(at::kLong).device(group_->device()));
  group_->allReduce(source, ReduceOp::kMax);
  broadcastFrom(*group_, moduleState(*module_), static_cast<int>(source.item<int64_t>()));
}

DdpStepStats DistributedDataParallel::lastStepStats() const { return reducer_->stats(); }

int DistributedDataParallel::bucketCount() const {
  return static_cast<int>(reducer_->bucketBytes().size());
}

std::vector<std::size_t> DistributedDataParallel::bucketBytes() const {
  return reducer_->bucketBytes();
}

}  // namespace ddprun::worker
