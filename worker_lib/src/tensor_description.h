// How the worker library names a tensor in messages: "float32[4, 3] on cpu".
#pragma once

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <string>

namespace ddprun::worker {

// PyTorch's names: float32, int64, ...
inline std::string dtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

inline std::string describeTensor(const at::Tensor& tensor) {
  if (!tensor.defined()) return "an undefined tensor";
  std::string shape;
  for (auto extent : tensor.sizes()) {
    if (!shape.empty()) shape += ", ";
    shape += std::to_string(extent);
  }
  return fmt::format("{}[{}] on {}", dtypeName(tensor.scalar_type()), shape, tensor.device().str());
}

}  // namespace ddprun::worker
