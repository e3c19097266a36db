// A new directory of this process's own (mkdtemp: a fresh name, mode 0700),
// for the launch's log directory and the places its files go when that
// disk is full.
//
// Thread-safety: functions of the file system only.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace ddprun {

// `parent`/`prefix` + 6 random characters, created. Throws ddprun::Error,
// saying what to do, when it cannot be.
std::filesystem::path makeUniqueDirectory(const std::filesystem::path& parent,
                                          const std::string& prefix);
// The same, or an empty path with `error` set.
std::filesystem::path makeUniqueDirectory(const std::filesystem::path& parent,
                                          const std::string& prefix, std::error_code& error);

// Whether `error` says the disk is full: no space, no inodes, or over quota.
bool diskFull(const std::error_code& error);

// The same under the temporary directory (TMPDIR, else /tmp).
std::filesystem::path makeTemporaryDirectory(const std::string& prefix);

}  // namespace ddprun
