// The process environment as a map (a snapshot; later setenv calls are not
// reflected), and the directories $PATH names.
//
// Thread-safety: reads environ; do not call while another thread changes it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddprun {

std::map<std::string, std::string> environmentMap();

// The directories of $PATH in order; an empty entry is the current directory
// (as execvp reads it); /usr/local/bin:/usr/bin:/bin when PATH is unset.
std::vector<std::string> executableSearchPath();

}  // namespace ddprun
