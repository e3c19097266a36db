// The message of an exception from LibTorch without the C++ backtrace that
// c10::Error appends (c10::Error::what_without_backtrace), for ddprun's
// own error messages, and the one translation of a failed c10d collective
// into ddprun's error types.
//
// Thread-safety: pure functions.
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <exception>
#include <string>

#include "ddprun/common/error.h"

namespace ddprun::worker {

inline std::string messageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// c10d's failures are c10::Error (std::exception) with Gloo's or NCCL's
// text; a timeout among them becomes TimeoutError, a mismatch that the
// debug wrapper found ddprun::Error, anything else NetworkError, all naming
// this rank and the collective.
[[noreturn]] inline void rethrowCollectiveError(const std::exception& e, int rank, int size,
                                                const std::string& what) {
  const std::string message = messageOf(e);
  const std::string full = fmt::format("rank {} of {}: {} failed: {}", rank, size, what, message);
  if (message.find("Detected mismatch between collectives") != std::string::npos) {
    throw Error(full);  // the ranks issued different collectives: a bug, not the network
  }
  if (message.find("imed out") != std::string::npos ||
      message.find("imeout") != std::string::npos ||
      message.find("monitoredBarrier") != std::string::npos) {
    throw TimeoutError(full);
  }
  throw NetworkError(full);
}

}  // namespace ddprun::worker
