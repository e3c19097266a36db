// The message of an exception from LibTorch without the C++ backtrace that
// c10::Error appends (c10::Error::what_without_backtrace), for ddprun's
// own error messages.
//
// Thread-safety: a pure function.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace ddprun::worker {

inline std::string messageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace ddprun::worker
