// commandOutput: runs a program to completion and returns what it printed,
// bounded in time and size, for the probes ddprun makes of other programs
// (the workers' PyTorch version, py-spy's stack of a hung worker).
//
// The program is started directly (posix_spawn, no shell: nothing in argv
// is interpreted), with ddprun's environment, stdin from /dev/null, and
// stderr to /dev/null or merged into the output. Past `limit` it is killed
// (SIGKILL) and reaped; what it printed until then is returned.
//
// Thread-safety: a free function; blocks the calling thread up to `limit`.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

struct CommandLimits {
  std::chrono::milliseconds time{10000};
  std::size_t bytes = 64 * 1024;  // output past this is read and dropped
  bool withStderr = false;        // stderr merged into the output
};

// nullopt when the program could not be started (argv[0] is a path).
std::optional<std::string> commandOutput(const std::vector<std::string>& argv,
                                         const CommandLimits& limits = {});

// The first executable `name` in the directories of `path` (a PATH value);
// empty when there is none.
std::string findExecutable(const std::string& name, const std::string& path);

}  // namespace ddprun
