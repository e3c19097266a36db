// Reading a worker's error file: torchelastic's JSON format, so Python's
// @record (torch.distributed.elastic.multiprocessing.errors) works as is.
//
// Two shapes are accepted:
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "...", "timestamp": "1700000000"}}}
//   {"message": "text", "timestamp": 1700000000}
//
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

// Nullopt when the file does not exist, is empty, or is not one of the two
// shapes (a garbled file never hides the exit code).
std::optional<WorkerError> readErrorFile(const std::filesystem::path& path);

}  // namespace ddprun::agent
