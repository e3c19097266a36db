// The process environment as a map (a snapshot; later setenv calls are not
// reflected).
//
// Thread-safety: reads environ; do not call while another thread changes it.
#pragma once

#include <map>
#include <string>

namespace ddprun {

std::map<std::string, std::string> environmentMap();

}  // namespace ddprun
