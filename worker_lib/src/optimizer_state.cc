#include "optimizer_state.h"

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <memory>

#include "ddprun/common/error.h"

namespace ddprun::worker {

namespace {

using Dict = c10::impl::GenericDict;

Dict stringDict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// How LibTorch's optimizers key their per-parameter state: the parameter's
// TensorImpl address, as text on 1.13 and as a pointer on 2.x.
auto stateKey(const at::Tensor& parameter) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(parameter.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
#endif
}

// Python's group keys for the options of SGD, Adam and AdamW (1.13 names).
void putOptions(Dict& group, const torch::optim::OptimizerOptions& options) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options)) {
    group.insert("lr", sgd->lr());
    group.insert("momentum", sgd->momentum());
    group.insert("dampening", sgd->dampening());
    group.insert("weight_decay", sgd->weight_decay());
    group.insert("nesterov", sgd->nesterov());
    group.insert("maximize", false);
    group.insert("foreach", c10::IValue());
    group.insert("differentiable", false);
    return;
  }
  auto adamLike = [&](double lr, std::tuple<double, double> betas, double eps, double decay,
                      bool amsgrad) {
    group.insert("lr", lr);
    group.insert("betas", c10::ivalue::Tuple::create(std::get<0>(betas), std::get<1>(betas)));
    group.insert("eps", eps);
    group.insert("weight_decay", decay);
    group.insert("amsgrad", amsgrad);
    group.insert("maximize", false);
    group.insert("foreach", c10::IValue());
    group.insert("capturable", false);
    group.insert("differentiable", false);
    group.insert("fused", false);
  };
  if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
    adamLike(adam->lr(), adam->betas(), adam->eps(), adam->weight_decay(), adam->amsgrad());
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) {
    adamLike(adamw->lr(), adamw->betas(), adamw->eps(), adamw->weight_decay(), adamw->amsgrad());
  }
}

// A number Python may have saved as an int (weight_decay=0) or a float.
double number(const c10::IValue& value) {
  return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
}

// The group's hyper-parameters back from Python's keys (what putOptions
// wrote), so a learning rate a scheduler changed survives a resume.
// Adam's and AdamW's options share their fields.
template <typename Options>
void takeAdamOptions(Options& options, const Dict& group) {
  const auto betas = group.at("betas").toTupleRef().elements();
  options.lr(number(group.at("lr")))
      .betas(std::make_tuple(number(betas.at(0)), number(betas.at(1))))
      .eps(number(group.at("eps")))
      .weight_decay(number(group.at("weight_decay")))
      .amsgrad(group.at("amsgrad").toBool());
}

void takeOptions(torch::optim::OptimizerOptions& options, const Dict& group) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    sgd->lr(number(group.at("lr")))
        .momentum(number(group.at("momentum")))
        .dampening(number(group.at("dampening")))
        .weight_decay(number(group.at("weight_decay")))
        .nesterov(group.at("nesterov").toBool());
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    takeAdamOptions(*adam, group);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    takeAdamOptions(*adamw, group);
  }
}

// Adam's and AdamW's per-parameter state share their fields.
template <typename State>
Dict adamState(const State& s) {
  Dict d = stringDict();
  d.insert("step", at::scalar_tensor(static_cast<double>(s.step()), at::kFloat));
  d.insert("exp_avg", s.exp_avg());
  d.insert("exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) d.insert("max_exp_avg_sq", s.max_exp_avg_sq());
  return d;
}

template <typename State>
std::unique_ptr<State> adamStateFrom(const Dict& d, const at::Device& device) {
  auto s = std::make_unique<State>();
  const c10::IValue step = d.at("step");
  s->step(step.isTensor() ? static_cast<int64_t>(step.toTensor().item<double>()) : step.toInt());
  s->exp_avg(d.at("exp_avg").toTensor().to(device));
  s->exp_avg_sq(d.at("exp_avg_sq").toTensor().to(device));
  if (d.contains("max_exp_avg_sq")) {
    s->max_exp_avg_sq(d.at("max_exp_avg_sq").toTensor().to(device));
  }
  return s;
}

enum class Kind { kSgd, kAdam, kAdamW, kOther };

Kind kindOf(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return Kind::kSgd;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return Kind::kAdamW;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return Kind::kAdam;
  return Kind::kOther;
}

}  // namespace

std::optional<c10::IValue> pythonStateDict(const torch::optim::Optimizer& optimizer) {
  const Kind kind = kindOf(optimizer);
  if (kind == Kind::kOther) return std::nullopt;
  Dict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    Dict g = stringDict();
    putOptions(g, group.options());
    c10::impl::GenericList params(c10::AnyType::get());  // generic: see torchSave()
    for (const auto& parameter : group.params()) {
      params.push_back(index);
      const auto found = optimizer.state().find(stateKey(parameter));
      if (found != optimizer.state().end()) {
        const auto& s = *found->second;
        if (kind == Kind::kSgd) {
          Dict d = stringDict();
          const auto& sgd = static_cast<const torch::optim::SGDParamState&>(s);
          d.insert("momentum_buffer", sgd.momentum_buffer().defined()
                                          ? c10::IValue(sgd.momentum_buffer())
                                          : c10::IValue());
          state.insert(index, d);
        } else if (kind == Kind::kAdam) {
          state.insert(index, adamState(static_cast<const torch::optim::AdamParamState&>(s)));
        } else {
          state.insert(index, adamState(static_cast<const torch::optim::AdamWParamState&>(s)));
        }
      }
      ++index;
    }
    g.insert("params", params);
    groups.push_back(g);
  }
  Dict result = stringDict();
  result.insert("state", state);
  result.insert("param_groups", groups);
  return c10::IValue(result);
}

void loadPythonStateDict(torch::optim::Optimizer& optimizer, const c10::IValue& stateDict,
                         const std::string& source) {
  const Kind kind = kindOf(optimizer);
  if (kind == Kind::kOther) {
    throw ConfigError(fmt::format(
        "{} holds an optimizer state in Python's layout, which ddprun maps for SGD, Adam and "
        "AdamW only",
        source));
  }
  if (!stateDict.isGenericDict() || !stateDict.toGenericDict().contains("state") ||
      !stateDict.toGenericDict().contains("param_groups")) {
    throw ConfigError(
        fmt::format("{}: the optimizer entry is not an optimizer state_dict", source));
  }
  const Dict dict = stateDict.toGenericDict();
  const auto groups = dict.at("param_groups").toList();
  if (groups.size() != optimizer.param_groups().size()) {
    throw ConfigError(
        fmt::format("{}: the optimizer state has {} parameter groups, this "
                    "optimizer {}",
                    source, groups.size(), optimizer.param_groups().size()));
  }
  const Dict state = dict.at("state").toGenericDict();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    const Dict savedGroup = groups.get(g).toGenericDict();
    const auto params = savedGroup.at("params").toList();
    if (params.size() != group.params().size()) {
      throw ConfigError(
          fmt::format("{}: parameter group {} has {} parameters in the checkpoint "
                      "and {} in this optimizer",
                      source, g, params.size(), group.params().size()));
    }
    takeOptions(group.options(), savedGroup);
    for (std::size_t j = 0; j < group.params().size(); ++j) {
      // The checkpoint's own numbering of this parameter.
      const int64_t saved = params.get(j).toInt();
      if (!state.contains(saved)) continue;
      const Dict s = state.at(saved).toGenericDict();
      const at::Device device = group.params()[j].device();
      std::unique_ptr<torch::optim::OptimizerParamState> restored;
      if (kind == Kind::kSgd) {
        auto sgd = std::make_unique<torch::optim::SGDParamState>();
        const auto buffer = s.at("momentum_buffer");
        if (buffer.isTensor()) sgd->momentum_buffer(buffer.toTensor().to(device));
        restored = std::move(sgd);
      } else if (kind == Kind::kAdam) {
        restored = adamStateFrom<torch::optim::AdamParamState>(s, device);
      } else {
        restored = adamStateFrom<torch::optim::AdamWParamState>(s, device);
      }
      optimizer.state()[stateKey(group.params()[j])] = std::move(restored);
    }
  }
}

}  // namespace ddprun::worker
