// Small text files: reading the first line of one (sysfs, procfs) for the
// launcher's accelerator counts and the agent's NUMA topology, and replacing
// one whole (the launcher's error file).
//
// Thread-safety: functions of the files only.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace ddprun {

// The first line of `path`, trimmed of the whitespace around it; "" when the
// file cannot be read.
std::string readFirstLine(const std::filesystem::path& path);

// Writes `content` to `path` through a temporary file beside it and a
// rename, so that a reader sees the old file or the whole new one. Returns ""
// when it did, else why not ("No space left on device"); a temporary that
// could not be finished is removed, never left behind.
std::string replaceFile(const std::filesystem::path& path, std::string_view content);

}  // namespace ddprun
