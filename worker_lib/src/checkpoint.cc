#include "ddprun/worker/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "ddprun/common/error.h"
#include "ddprun/worker/process_group.h"
#include "error_text.h"
#include "optimizer_state.h"
#include "torch_save_reader.h"

namespace ddprun::worker {

namespace {

namespace fs = std::filesystem;
using Dict = c10::impl::GenericDict;

constexpr char kModel[] = "model";
constexpr char kOptimizer[] = "optimizer";
// Optimizers other than SGD, Adam and AdamW: LibTorch's own archive of
// their state, as a uint8 tensor (Python sees an opaque byte tensor).
constexpr char kOptimizerArchive[] = "optimizer_libtorch";
constexpr char kStep[] = "step";
constexpr char kDdpPrefix[] = "module.";
// A Lightning .ckpt: the LightningModule's state_dict, its optimizers'
// state_dicts and the step.
constexpr char kLightningStateDict[] = "state_dict";
constexpr char kLightningOptimizers[] = "optimizer_states";
constexpr char kLightningStep[] = "global_step";

void syncFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::vector<char> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("cannot open checkpoint {}", path));
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// The tensors of a state_dict by name, found with or without the
// "module." prefix that wrapping a model in DDP adds, or under the prefix a
// Lightning module's attribute adds ("model.0.weight" for "0.weight").
class NamedTensors {
 public:
  void add(const std::string& name, at::Tensor tensor) { tensors_[name] = std::move(tensor); }

  // Picks the prefix under which every one of `names` is present, if the
  // names are not present as they are (the first saved name that ends with
  // ".<first name>" proposes it).
  void findPrefixFor(const std::vector<std::string>& names) {
    prefix_.clear();
    if (names.empty() || allFound(names)) return;
    for (const auto& [saved, tensor] : tensors_) {
      const std::string& first = names.front();
      if (saved.size() <= first.size() + 1 || !saved.ends_with("." + first)) continue;
      prefix_ = saved.substr(0, saved.size() - first.size());
      if (allFound(names)) return;
    }
    prefix_.clear();
  }

  const at::Tensor* find(const std::string& name) const {
    for (const std::string& candidate :
         {name, kDdpPrefix + name,
          name.rfind(kDdpPrefix, 0) == 0 ? name.substr(std::strlen(kDdpPrefix)) : name,
          prefix_ + name}) {
      auto it = tensors_.find(candidate);
      if (it != tensors_.end()) return &it->second;
    }
    return nullptr;
  }

  const std::string& prefix() const { return prefix_; }

 private:
  bool allFound(const std::vector<std::string>& names) const {
    return std::all_of(names.begin(), names.end(),
                       [this](const std::string& n) { return find(n) != nullptr; });
  }

  std::unordered_map<std::string, at::Tensor> tensors_;
  std::string prefix_;
};

void restore(const NamedTensors& saved, const std::string& path,
             const torch::OrderedDict<std::string, at::Tensor>& named, bool isBuffer) {
  torch::NoGradGuard noGrad;
  for (const auto& item : named) {
    const at::Tensor* tensor = saved.find(item.key());
    if (tensor == nullptr) {
      throw ConfigError(fmt::format(
          "checkpoint {} has no {} '{}' (nor 'module.{}'); was it written for another model?", path,
          isBuffer ? "buffer" : "parameter", item.key(), item.key()));
    }
    at::Tensor target = item.value();
    if (tensor->sizes() != target.sizes()) {
      throw ConfigError(fmt::format("checkpoint {}: '{}' has shape {} but the model expects {}",
                                    path, item.key(), fmt::join(tensor->sizes(), "x"),
                                    fmt::join(target.sizes(), "x")));
    }
    target.copy_(*tensor);
  }
}

// torch.save's format for `value`, as torch::jit::pickle_save writes it but
// without the type tags it adds to typed dicts (a GLOBAL
// torch.jit._pickle.restore_type_tag), which torch.load refuses since 2.6
// (weights_only=True by default). Lists must be generic (not c10::List<int>
// and the like), for the same reason.
std::vector<char> torchSave(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t n) { pickle.insert(pickle.end(), bytes, bytes + n); }, nullptr,
      nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    const auto* begin = static_cast<const char*>(bytes);
    archive.insert(archive.end(), begin, begin + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return archive;
}

// What a checkpoint file holds, in torch.save's format: a dict that
// Python's torch.load returns as
//   {"model": state_dict, "optimizer": optimizer.state_dict(), "step": n}.
std::vector<char> encode(const torch::nn::Module& module, torch::optim::Optimizer* optimizer,
                         std::int64_t step) {
  Dict model(c10::StringType::get(), c10::TensorType::get());
  for (const auto& item : module.named_parameters())
    model.insert(item.key(), item.value().detach());
  for (const auto& item : module.named_buffers()) model.insert(item.key(), item.value().detach());
  Dict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert(kModel, model);
  if (optimizer != nullptr) {
    if (auto state = pythonStateDict(*optimizer)) {
      checkpoint.insert(kOptimizer, *state);
    } else {
      torch::serialize::OutputArchive archive;
      optimizer->save(archive);
      std::ostringstream bytes;
      archive.save_to(bytes);
      const std::string text = bytes.str();
      at::Tensor blob = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
      std::memcpy(blob.data_ptr(), text.data(), text.size());
      checkpoint.insert(kOptimizerArchive, blob);
    }
  }
  checkpoint.insert(kStep, step);
  return torchSave(checkpoint);
}

bool isOpaqueObject(const c10::IValue& value) {
  return value.isGenericDict() && value.toGenericDict().contains("__class__");
}

// The names of a module's parameters and buffers, in order.
std::vector<std::string> tensorNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& source : {module.named_parameters(), module.named_buffers()}) {
    for (const auto& item : source) names.push_back(item.key());
  }
  return names;
}

// Restores the module (and optimizer) from a checkpoint's bytes: ours, a
// Python torch.save of a state_dict (model.state_dict() as it is, or a dict
// holding it under "model"), a Lightning .ckpt ("state_dict",
// "optimizer_states", "global_step"), or the LibTorch archive that earlier
// ddprun versions wrote. Returns the step (0 when the file has none).
std::int64_t decode(const std::vector<char>& bytes, const std::string& path,
                    torch::nn::Module& module, torch::optim::Optimizer* optimizer,
                    const std::string& device) {
  // A torch.save file, or the LibTorch (TorchScript) archive of ddprun's
  // earlier checkpoints, which LibTorch's own loader reads.
  // The archive is looked into a second time only when the first reading
  // is not a torch.save dict.
  c10::IValue value;
  std::string pickleError;
  try {
    value = readTorchSave(bytes, path);
  } catch (const ConfigError& e) {
    pickleError = e.what();
  }
  if (!pickleError.empty() || !value.isGenericDict() || isOpaqueObject(value)) {
    if (!isTorchScriptArchive(bytes)) {
      if (!pickleError.empty()) throw ConfigError(pickleError);
      throw ConfigError(fmt::format(
          "checkpoint {} holds a {}, not a dict of tensors (a state_dict, or a dict holding one "
          "under \"model\" or \"state_dict\")",
          path,
          isOpaqueObject(value) ? value.toGenericDict().at("__class__").toStringRef()
                                : std::string(value.tagKind())));
    }
    // The LibTorch archive of ddprun's earlier checkpoints.
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(bytes.data(), bytes.size(), at::Device(device));
    } catch (const std::exception& e) {
      throw ConfigError(
          fmt::format("checkpoint {} is neither a torch.save file ({}) nor a LibTorch archive ({})",
                      path, pickleError.empty() ? "not a dict" : pickleError, messageOf(e)));
    }
    torch::serialize::InputArchive model;
    torch::serialize::InputArchive* tensors = &archive;
    if (archive.try_read(kModel, model)) tensors = &model;
    NamedTensors saved;
    for (const auto& source : {module.named_parameters(), module.named_buffers()}) {
      for (const auto& item : source) {
        at::Tensor t;
        for (const std::string& name : {item.key(), kDdpPrefix + item.key()}) {
          if (tensors->try_read(name, t, /*is_buffer=*/false) ||
              tensors->try_read(name, t, /*is_buffer=*/true)) {
            saved.add(item.key(), t);
            break;
          }
        }
      }
    }
    restore(saved, path, module.named_parameters(), false);
    restore(saved, path, module.named_buffers(), true);
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
  const Dict dict = value.toGenericDict();
  const auto holds = [&](const char* key) {
    return dict.contains(key) && dict.at(key).isGenericDict() && !isOpaqueObject(dict.at(key));
  };
  // Ours (or Python's {"model": ...}), Lightning's, else a state_dict.
  const bool wrapped = holds(kModel);
  const bool lightning = !wrapped && holds(kLightningStateDict);
  const Dict tensors = wrapped     ? dict.at(kModel).toGenericDict()
                       : lightning ? dict.at(kLightningStateDict).toGenericDict()
                                   : dict;
  NamedTensors saved;
  for (const auto& entry : tensors) {
    if (entry.key().isString() && entry.value().isTensor()) {
      saved.add(entry.key().toStringRef(), entry.value().toTensor());
    }
  }
  saved.findPrefixFor(tensorNames(module));
  restore(saved, path, module.named_parameters(), false);
  restore(saved, path, module.named_buffers(), true);
  if (optimizer != nullptr) {
    const c10::IValue* lightningState = nullptr;
    if (lightning && dict.contains(kLightningOptimizers) &&
        dict.at(kLightningOptimizers).isList() &&
        !dict.at(kLightningOptimizers).toListRef().empty()) {
      lightningState = &dict.at(kLightningOptimizers).toListRef()[0];
    }
    if (wrapped && dict.contains(kOptimizer)) {
      loadPythonStateDict(*optimizer, dict.at(kOptimizer), "checkpoint " + path);
    } else if (wrapped && dict.contains(kOptimizerArchive)) {
      const at::Tensor blob = dict.at(kOptimizerArchive).toTensor().contiguous();
      torch::serialize::InputArchive state;
      state.load_from(static_cast<const char*>(blob.data_ptr()), blob.numel(), at::Device(device));
      optimizer->load(state);
    } else if (lightningState != nullptr) {
      loadPythonStateDict(*optimizer, *lightningState, "checkpoint " + path);
    } else {
      throw ConfigError(fmt::format("checkpoint {} holds no optimizer state", path));
    }
  }
  const char* stepKey = lightning ? kLightningStep : kStep;
  if ((wrapped || lightning) && dict.contains(stepKey) && dict.at(stepKey).isInt()) {
    return dict.at(stepKey).toInt();
  }
  return 0;
}

}  // namespace

void writeCheckpoint(const std::string& path, const torch::nn::Module& module,
                     torch::optim::Optimizer* optimizer, std::int64_t step) {
  const fs::path target(path);
  const fs::path temporary = target.string() + fmt::format(".tmp.{}", ::getpid());
  try {
    const std::vector<char> bytes = encode(module, optimizer, step);
    if (target.has_parent_path()) fs::create_directories(target.parent_path());
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      out.close();
      if (!out) throw ConfigError(fmt::format("writing {} failed", temporary.string()));
    }
    syncFile(temporary);
    fs::rename(temporary, target);
  } catch (const std::exception& e) {
    // A failed save leaves nothing behind but the previous checkpoint.
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw ConfigError(fmt::format("cannot write checkpoint {}: {}", path, messageOf(e)));
  }
  if (target.has_parent_path()) syncFile(target.parent_path());
}

void saveCheckpoint(ProcessGroup& group, const std::string& path, const torch::nn::Module& module,
                    torch::optim::Optimizer* optimizer, std::int64_t step) {
  std::string failure;
  if (group.rank() == 0) {
    try {
      writeCheckpoint(path, module, optimizer, step);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  // Rank 0's outcome, with its reason, reaches everyone, so no rank trains
  // on believing a checkpoint exists that was never written.
  failure = group.broadcastString(failure, 0);
  if (!failure.empty()) {
    throw ConfigError(group.rank() == 0 ? failure
                                        : fmt::format("rank 0 could not save: {}", failure));
  }
}

bool checkpointExists(const std::string& path) { return fs::is_regular_file(path); }

std::int64_t loadCheckpoint(const std::string& path, torch::nn::Module& module,
                            torch::optim::Optimizer* optimizer, const std::string& device) {
  if (!checkpointExists(path)) {
    throw ConfigError(fmt::format("checkpoint {} does not exist", path));
  }
  return decode(readFile(path), path, module, optimizer, device);
}

std::optional<std::int64_t> resumeCheckpoint(ProcessGroup& group, const std::string& path,
                                             torch::nn::Module& module,
                                             torch::optim::Optimizer* optimizer,
                                             const std::string& device) {
  // Rank 0 alone decides, and sends the file's bytes: every rank resumes
  // from the same step, with or without a shared file system.
  std::string bytes;
  std::string failure;
  bool exists = false;
  if (group.rank() == 0) {
    exists = checkpointExists(path);
    if (exists) {
      try {
        const auto content = readFile(path);
        bytes.assign(content.begin(), content.end());
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
  }
  failure = group.broadcastString(failure, 0);
  if (!failure.empty()) {
    throw ConfigError(fmt::format("rank 0 could not read checkpoint {}: {}", path, failure));
  }
  if (!group.broadcastFlag(exists, 0)) return std::nullopt;
  bytes = group.broadcastString(bytes, 0);
  std::string error;
  std::int64_t step = 0;
  try {
    step = decode(std::vector<char>(bytes.begin(), bytes.end()), path, module, optimizer, device);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // A rank that cannot take the checkpoint (another model) stops them all.
  const auto errors = group.allGatherBytes(error);
  for (int r = 0; r < group.size(); ++r) {
    if (!errors[r].empty()) {
      throw ConfigError(fmt::format("rank {} could not resume from {}: {}", r, path, errors[r]));
    }
  }
  return step;
}

}  // namespace ddprun::worker
