// Checkpoints of a module (parameters and buffers by name), an optional
// optimizer state and the step, in torch.save's format: Python's
// torch.load(path) returns {"model": state_dict, "optimizer":
// optimizer.state_dict(), "step": n} (SGD, Adam and AdamW in Python's
// layout; another optimizer's state as LibTorch's archive in a byte tensor
// under "optimizer_libtorch").
//
// saveCheckpoint is called by every rank: rank 0 writes a temporary file
// beside `path`, flushes it to disk and renames it over `path` (a crash
// never leaves a half-written checkpoint; a failed save leaves no
// temporary), and its outcome reaches every rank, which throws when rank 0
// failed. loadCheckpoint reads ours, a Python torch.save of a state_dict
// (model.state_dict() as it is, an OrderedDict; or a dict holding it under
// "model"), a Lightning .ckpt ("state_dict", "optimizer_states",
// "global_step"), or the LibTorch archive of earlier ddprun versions; names
// match with or without the "module." prefix that wrapping a model in DDP
// adds, or a Lightning module's attribute prefix ("model."). resumeCheckpoint is
// the distributed form: rank 0 decides whether to resume and sends the
// file, so every rank resumes from the same step with or without a shared
// file system.
//
// Example:
//   std::int64_t step = resumeCheckpoint(*group, path, *model, &optimizer).value_or(0);
//   ...
//   saveCheckpoint(*group, path, *model, &optimizer, step);
//
// Thread-safety: call from the training thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddprun::worker {

class ProcessGroup;

void saveCheckpoint(ProcessGroup& group, const std::string& path, const torch::nn::Module& module,
                    torch::optim::Optimizer* optimizer, std::int64_t step);

// Writes the checkpoint from this process alone (no group; same format).
void writeCheckpoint(const std::string& path, const torch::nn::Module& module,
                     torch::optim::Optimizer* optimizer, std::int64_t step);

// Returns the saved step. Throws ConfigError when the file is missing or
// unreadable, or lacks a parameter or buffer (naming it), or a shape differs.
std::int64_t loadCheckpoint(const std::string& path, torch::nn::Module& module,
                            torch::optim::Optimizer* optimizer, const std::string& device = "cpu");

bool checkpointExists(const std::string& path);

// Every rank calls it. nullopt (on every rank) when rank 0 has no file at
// `path`; else the saved step, after every rank loaded the checkpoint.
// Throws ConfigError on every rank when rank 0 cannot read the file or a
// rank cannot take it (naming the rank).
std::optional<std::int64_t> resumeCheckpoint(ProcessGroup& group, const std::string& path,
                                             torch::nn::Module& module,
                                             torch::optim::Optimizer* optimizer,
                                             const std::string& device = "cpu");

}  // namespace ddprun::worker
