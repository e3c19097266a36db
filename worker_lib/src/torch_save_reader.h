// readTorchSave: what Python's torch.load returns for a torch.save file,
// as an IValue, for the checkpoints people actually write:
// torch.save(model.state_dict(), path) (a collections.OrderedDict, which
// LibTorch's own unpickler reads as None, in 1.13 and 2.x alike), Lightning's
// .ckpt (a dict holding "state_dict", "optimizer_states", "global_step",
// hyperparameters of any Python type), plain dicts, and the files
// torch::pickle_save writes.
//
// The zip container is LibTorch's own reader (caffe2's PyTorchStreamReader:
// the archive's folder, zip64, alignment); data.pkl runs on a small pickle
// machine of its own (protocol 2, which torch.save uses: the 32 opcodes of
// PyTorch's weights-only unpickler, plus torch::pickle_save's type tags).
// Nothing is imported or executed: a class it does not know becomes a dict
// {"__class__": "module.name", "__args__": (...), ...its items and state},
// so a checkpoint with numpy, pathlib or omegaconf hyperparameters still
// loads. Tensors (_rebuild_tensor_v2, _rebuild_parameter) are built on one
// storage per data/<key> record, so views share memory as in Python.
// Mapping:
//   dict, OrderedDict, defaultdict -> GenericDict (Any -> Any, insertion order)
//   list, set -> GenericList; tuple -> Tuple; str, bytes -> string
//   int (up to 64 bits), float, bool, None -> the same
//   a class used as a value (torch.float16) -> its "module.name" string
//
// Throws ConfigError naming `what` and the reason: not a zip archive, a
// pickle protocol above 2, an opcode or a tensor layout it does not read, a
// storage record out of bounds, big-endian data.
//
// Thread-safety: pure function.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace ddprun::worker {

c10::IValue readTorchSave(const std::vector<char>& bytes, const std::string& what);

// True when `bytes` start as a zip archive (torch.save since 1.6).
bool isZipArchive(const std::vector<char>& bytes);

// True for a TorchScript archive (torch::serialize::OutputArchive, which
// earlier ddprun versions wrote): it holds constants.pkl.
bool isTorchScriptArchive(const std::vector<char>& bytes);

}  // namespace ddprun::worker
