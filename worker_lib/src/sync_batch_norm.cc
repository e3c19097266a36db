#include "ddprun/worker/sync_batch_norm.h"

#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dimensions a channel's statistics run over: all but dimension 1.
std::vector<int64_t> reducedDims(const at::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// [C] -> [1, C, 1, ...] to broadcast against the input.
at::Tensor perChannel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = values.size(0);
  return values.view(shape);
}

// Keeps the group alive in the autograd graph (saved_data holds IValues).
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(std::shared_ptr<ProcessGroup> g) : group(std::move(g)) {}
  std::shared_ptr<ProcessGroup> group;
};

// y = (x - mean) * invstd * weight + bias with the group's statistics; its
// backward all-reduces the two gradient sums the input's gradient needs
// (the weight's and bias's gradients stay local: DDP averages them).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& mean,
                            const at::Tensor& invstd, double count,
                            const std::shared_ptr<ProcessGroup>& group) {
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    auto y = (input - perChannel(mean, input)) * perChannel(invstd, input);
    return y * perChannel(weight, input) + perChannel(bias, input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradients) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    const auto holder =
        c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule());
    ProcessGroup* group = holder->group.get();
    const at::Tensor dy = gradients[0].contiguous();
    const auto dims = reducedDims(input);
    const at::Tensor centred = input - perChannel(mean, input);
    const at::Tensor sumDy = dy.sum(dims);
    const at::Tensor sumDyXmu = (dy * centred).sum(dims);
    const at::Tensor gradWeight = sumDyXmu * invstd;
    const at::Tensor gradBias = sumDy;
    at::Tensor sums = at::cat({sumDy, sumDyXmu}).contiguous();
    group->allReduce(sums);
    const int64_t channels = mean.size(0);
    const at::Tensor meanDy = sums.narrow(0, 0, channels) / count;
    const at::Tensor meanDyXmu = sums.narrow(0, channels, channels) / count;
    const at::Tensor gradInput = (dy - perChannel(meanDy, input) -
                                  centred * perChannel(invstd * invstd * meanDyXmu, input)) *
                                 perChannel(invstd * weight, input);
    return {gradInput,    gradWeight,   gradBias,    at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(torch::nn::BatchNormOptions options_,
                                     std::shared_ptr<ProcessGroup> group)
    : options(std::move(options_)), group_(std::move(group)) {
  if (!group_) throw ConfigError("SyncBatchNorm needs a process group");
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({c}));
    bias = register_parameter("bias", torch::zeros({c}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({c}));
    running_var = register_buffer("running_var", torch::ones({c}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", torch::tensor(0, torch::dtype(torch::kLong)));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  const int64_t c = options.num_features();
  if (input.dim() < 2 || input.size(1) != c) {
    throw ConfigError(fmt::format(
        "SyncBatchNorm: expected an input of shape [N, {}, *], got {} dimensions with {} channels",
        c, input.dim(), input.dim() >= 2 ? input.size(1) : 0));
  }
  const at::Tensor w = options.affine() ? weight : torch::ones({c}, input.options());
  const at::Tensor b = options.affine() ? bias : torch::zeros({c}, input.options());
  if (!is_training()) {
    // Eval is local, as in Python: the running statistics, or (without
    // them) this batch's own.
    return torch::batch_norm(input, w, b, running_mean, running_var,
                             /*training=*/!options.track_running_stats(), 0.0, options.eps(),
                             false);
  }
  // Each rank's per-channel mean and biased variance and its count,
  // gathered and merged exactly (as batch_norm_gather_stats_with_counts).
  at::Tensor mean;
  at::Tensor var;
  double total = 0;
  {
    torch::NoGradGuard noGrad;
    const auto dims = reducedDims(input);
    const at::Tensor x = input.detach();
    const at::Tensor localMean = x.mean(dims);
    const at::Tensor localVar = (x - perChannel(localMean, x)).pow(2).mean(dims);
    const double localCount = static_cast<double>(x.numel() / c);
    at::Tensor packed =
        at::cat({localMean, localVar, at::full({1}, localCount, localMean.options())});
    const at::Tensor all = group_->allGather(packed.contiguous());
    const at::Tensor counts = all.narrow(1, 2 * c, 1);  // [W, 1]
    total = counts.sum().item<double>();
    const at::Tensor means = all.narrow(1, 0, c);
    const at::Tensor vars = all.narrow(1, c, c);
    mean = (means * counts).sum(0) / total;
    var = ((vars + (means - mean).pow(2)) * counts).sum(0) / total;
    if (options.track_running_stats()) {
      num_batches_tracked += 1;
      const double momentum = options.momentum().has_value()
                                  ? *options.momentum()
                                  : 1.0 / num_batches_tracked.item<double>();
      running_mean.mul_(1 - momentum).add_(mean, momentum);
      const double unbiased = total > 1 ? total / (total - 1) : 1.0;
      running_var.mul_(1 - momentum).add_(var * unbiased, momentum);
    }
  }
  const at::Tensor invstd = (var + options.eps()).rsqrt();
  return SyncBatchNormFunction::apply(input, w, b, mean, invstd, total, group_);
}

namespace {

// Calls `fn` with `module` as the BatchNorm1d, 2d or 3d it is; false when
// it is none of them.
template <typename Fn>
bool withBatchNorm(const torch::nn::Module& module, Fn&& fn) {
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module))
    return fn(*bn), true;
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module))
    return fn(*bn), true;
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module))
    return fn(*bn), true;
  return false;
}

// A SyncBatchNorm with the options, state and mode of `bn`.
template <typename BatchNormImpl>
SyncBatchNorm syncCopyOf(const BatchNormImpl& bn, const std::shared_ptr<ProcessGroup>& group) {
  SyncBatchNorm sync(bn.options, group);
  torch::NoGradGuard noGrad;
  for (auto& [mine, theirs] : std::vector<std::pair<at::Tensor*, const at::Tensor*>>{
           {&sync->weight, &bn.weight},
           {&sync->bias, &bn.bias},
           {&sync->running_mean, &bn.running_mean},
           {&sync->running_var, &bn.running_var},
           {&sync->num_batches_tracked, &bn.num_batches_tracked}}) {
    if (mine->defined() && theirs->defined()) {
      *mine = mine->to(theirs->options());
      mine->copy_(*theirs);
    }
  }
  sync->train(bn.is_training());
  return sync;
}

}  // namespace

torch::nn::Sequential convertSyncBatchNorm(const torch::nn::Sequential& model,
                                           const std::shared_ptr<ProcessGroup>& group) {
  if (!group) throw ConfigError("convertSyncBatchNorm needs a process group");
  torch::nn::Sequential result;
  const auto children = model->named_children();
  std::size_t index = 0;
  for (const auto& entry : *model) {
    const std::string name = children[index++].key();
    const auto child = entry.ptr();
    SyncBatchNorm sync{nullptr};
    if (withBatchNorm(*child, [&](const auto& bn) { sync = syncCopyOf(bn, group); })) {
      result->push_back(std::string(name), sync.ptr());
    } else {
      for (const auto& inner : child->named_modules()) {
        if (withBatchNorm(*inner.value(), [](const auto&) {})) {
          throw ConfigError(fmt::format(
              "convertSyncBatchNorm: the BatchNorm at '{}.{}' sits inside a {}, whose forward "
              "calls it through a typed member that no converter can redirect; build that "
              "module with ddprun::worker::SyncBatchNorm instead",
              name, inner.key(), child->name()));
        }
      }
      result->push_back(std::string(name), entry);
    }
  }
  result->train(model->is_training());
  return result;
}

}  // namespace ddprun::worker
