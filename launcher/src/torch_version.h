// Which PyTorch a Python interpreter would import, without importing it.
//
// The launcher asks once, for Python programs only, so that workers get the
// environment their PyTorch reads (e.g. NCCL_ASYNC_ERROR_HANDLING before
// 2.2, TORCH_NCCL_ASYNC_ERROR_HANDLING after, never both: 2.x warns about the
// old name). The probe runs `PYTHON -c ...` with importlib's find_spec and
// reads torch/version.py: one interpreter start (+15 ms per launch measured
// with /usr/bin/python3), bounded by a 10 s deadline.
//
// Thread-safety: pure functions (they start a process).
#pragma once

#include <optional>
#include <string>

namespace ddprun::launcher {

struct TorchVersion {
  int major = 0;
  int minor = 0;
  std::string text;  // "2.6.0+debian"
};

// nullopt when the interpreter cannot run or has no torch.
std::optional<TorchVersion> probeTorchVersion(const std::string& interpreter);

// "1.13.1" -> {1, 13}; nullopt for text that is not a version.
std::optional<TorchVersion> parseTorchVersion(const std::string& text);

}  // namespace ddprun::launcher
