// require(): an expectation inside a spawn()ed rank. GoogleTest's macros
// only record failures in the process that runs the test, so a rank throws
// instead; its non-zero exit makes spawn() throw in the test's process.
#pragma once

#include <string>

#include "ddprun/common/error.h"

namespace ddprun::worker {

inline void require(bool condition, const std::string& what) {
  if (!condition) throw Error("expectation failed: " + what);
}

}  // namespace ddprun::worker
