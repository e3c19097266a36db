// errorHint: what to do about a worker failure ddprun recognises from its
// message (error file or last stderr lines): a taken port, Lightning's
// devices × num_nodes that do not make the world size. One line for the
// failure report's "hint", or empty.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

std::string errorHint(const WorkerFailure& failure);

}  // namespace ddprun::agent
