// StopFile: a worker that prints `what` and then waits until the test says
// stop (a file in the test's scratch folder), not for a time a loaded
// machine may outlast.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "scratch_folder.h"

namespace ddprun::harness {

struct StopFile {
  std::filesystem::path path = scratch() / "stop";
  // A shell script: echo `what`, then wait for the stop.
  std::string script(const std::string& what) const {
    return fmt::format("echo {}; while [ ! -e {} ]; do sleep 0.05; done", what, path.string());
  }
  void create() const { std::ofstream(path).put('1'); }
};

}  // namespace ddprun::harness
