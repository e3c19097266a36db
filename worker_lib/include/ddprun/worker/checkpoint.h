// Checkpoints of a module (parameters and buffers by name), an optional
// optimizer state and the step, in LibTorch's archive format.
//
// saveCheckpoint is called by every rank: rank 0 writes a temporary file
// beside `path`, flushes it to disk and renames it over `path` (a crash
// never leaves a half-written checkpoint), then all ranks meet in a
// barrier, so the file is complete when any rank returns.
// loadCheckpoint runs on every rank and maps the tensors onto `device`; it
// accepts names with or without the "module." prefix that wrapping a model
// in DDP adds, so single-process and distributed checkpoints are
// interchangeable.
//
// Example:
//   if (checkpointExists(path)) step = loadCheckpoint(path, *model, &optimizer);
//   ...
//   saveCheckpoint(*group, path, *model, &optimizer, step);
//
// Thread-safety: call from the training thread.
#pragma once

#include <cstdint>
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

}  // namespace ddprun::worker
