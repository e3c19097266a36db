#include "ddprun/worker/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "ddprun/common/error.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

namespace {

namespace fs = std::filesystem;
constexpr char kModel[] = "model";
constexpr char kOptimizer[] = "optimizer";
constexpr char kStep[] = "step";
constexpr char kDdpPrefix[] = "module.";

void syncFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Reads `name`, or its spelling with/without "module.", into `tensor`.
bool readEither(torch::serialize::InputArchive& archive, const std::string& name,
                at::Tensor& tensor, bool isBuffer) {
  if (archive.try_read(name, tensor, isBuffer)) return true;
  if (archive.try_read(kDdpPrefix + name, tensor, isBuffer)) return true;
  const std::string prefix = kDdpPrefix;
  if (name.rfind(prefix, 0) == 0)
    return archive.try_read(name.substr(prefix.size()), tensor, isBuffer);
  return false;
}

void restore(torch::serialize::InputArchive& archive, const std::string& path,
             const torch::OrderedDict<std::string, at::Tensor>& named, bool isBuffer) {
  torch::NoGradGuard noGrad;
  for (const auto& item : named) {
    at::Tensor saved;
    if (!readEither(archive, item.key(), saved, isBuffer)) {
      throw ConfigError(fmt::format(
          "checkpoint {} has no {} '{}' (nor 'module.{}'); was it written for another model?", path,
          isBuffer ? "buffer" : "parameter", item.key(), item.key()));
    }
    at::Tensor target = item.value();
    if (saved.sizes() != target.sizes()) {
      throw ConfigError(fmt::format("checkpoint {}: '{}' has shape {} but the model expects {}",
                                    path, item.key(), fmt::join(saved.sizes(), "x"),
                                    fmt::join(target.sizes(), "x")));
    }
    target.copy_(saved);
  }
}

}  // namespace

void writeCheckpoint(const std::string& path, const torch::nn::Module& module,
                     torch::optim::Optimizer* optimizer, std::int64_t step) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model;
  for (const auto& item : module.named_parameters()) model.write(item.key(), item.value());
  for (const auto& item : module.named_buffers()) model.write(item.key(), item.value(), true);
  archive.write(kModel, model);
  if (optimizer != nullptr) {
    torch::serialize::OutputArchive state;
    optimizer->save(state);
    archive.write(kOptimizer, state);
  }
  archive.write(kStep, c10::IValue(step));
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const fs::path temporary = target.string() + fmt::format(".tmp.{}", ::getpid());
  try {
    archive.save_to(temporary.string());
  } catch (const c10::Error& e) {
    throw ConfigError(
        fmt::format("cannot write checkpoint {}: {}", path, e.what_without_backtrace()));
  }
  syncFile(temporary);
  fs::rename(temporary, target);
  if (target.has_parent_path()) syncFile(target.parent_path());
}

void saveCheckpoint(ProcessGroup& group, const std::string& path, const torch::nn::Module& module,
                    torch::optim::Optimizer* optimizer, std::int64_t step) {
  std::optional<ConfigError> failure;
  if (group.rank() == 0) {
    try {
      writeCheckpoint(path, module, optimizer, step);
    } catch (const ConfigError& e) {
      failure = e;
    }
  }
  // Rank 0's outcome reaches everyone, so no rank trains on believing a
  // checkpoint exists that was never written.
  const bool ok = group.broadcastFlag(!failure.has_value(), 0);
  if (failure) throw *failure;
  if (!ok) throw ConfigError(fmt::format("rank 0 could not write checkpoint {}", path));
}

bool checkpointExists(const std::string& path) { return fs::is_regular_file(path); }

std::int64_t loadCheckpoint(const std::string& path, torch::nn::Module& module,
                            torch::optim::Optimizer* optimizer, const std::string& device) {
  if (!checkpointExists(path)) {
    throw ConfigError(fmt::format("checkpoint {} does not exist", path));
  }
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, at::Device(device));
  } catch (const c10::Error& e) {
    throw ConfigError(fmt::format("checkpoint {} is not a readable LibTorch archive: {}", path,
                                  e.what_without_backtrace()));
  }
  torch::serialize::InputArchive model;
  torch::serialize::InputArchive* tensors = &archive;
  if (archive.try_read(kModel, model)) tensors = &model;
  restore(*tensors, path, module.named_parameters(), false);
  restore(*tensors, path, module.named_buffers(), true);
  if (optimizer != nullptr) {
    torch::serialize::InputArchive state;
    if (!archive.try_read(kOptimizer, state)) {
      throw ConfigError(fmt::format("checkpoint {} holds no optimizer state", path));
    }
    optimizer->load(state);
  }
  c10::IValue step;
  if (archive.try_read(kStep, step) && step.isInt()) return step.toInt();
  return 0;
}

}  // namespace ddprun::worker
