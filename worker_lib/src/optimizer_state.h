// An optimizer's state as Python's optimizer.state_dict() lays it out, so a
// checkpoint written in C++ is what torch.load users expect, and back:
//   {"state": {index: {"momentum_buffer" | "step", "exp_avg", ...}},
//    "param_groups": [{"lr": ..., ..., "params": [indices]}]}
// with parameters numbered across the groups in order, as Python does.
// SGD, Adam and AdamW are mapped field by field (their Python names and
// types: Adam's "step" is a float tensor); other optimizers are not
// (pythonStateDict returns nullopt and the caller keeps LibTorch's own
// serialisation).
//
// Thread-safety: none; the training thread's optimizer.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace ddprun::worker {

std::optional<c10::IValue> pythonStateDict(const torch::optim::Optimizer& optimizer);

// Restores what pythonStateDict wrote (or Python's state_dict() of the same
// optimizer type). Throws ConfigError, naming `source`, when the groups or
// parameter counts differ or the optimizer type is not mapped.
void loadPythonStateDict(torch::optim::Optimizer& optimizer, const c10::IValue& stateDict,
                         const std::string& source);

}  // namespace ddprun::worker
