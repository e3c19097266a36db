// The first line of a small text file (sysfs, procfs), trimmed of the
// whitespace around it; "" when the file cannot be read. One reader for the
// launcher's accelerator counts and the agent's NUMA topology.
//
// Thread-safety: a pure function of the file.
#pragma once

#include <filesystem>
#include <string>

namespace ddprun {

std::string readFirstLine(const std::filesystem::path& path);

}  // namespace ddprun
