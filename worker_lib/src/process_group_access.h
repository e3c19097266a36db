// The library's own view of a ProcessGroup's c10d group, for the parts of
// LibTorch that take one (c10d::Reducer, verify_params_across_processes).
//
// Thread-safety: as the group.
#pragma once

#include "c10d_group.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

struct ProcessGroupAccess {
  // The group as c10d's DDP pieces take it (see asProcessGroup()).
  static c10::intrusive_ptr<c10d::ProcessGroup> processGroup(ProcessGroup& group);
  // Replaces what the group knows of its environment (an MPI world learns
  // its node only after it exists).
  static void setEnvironment(ProcessGroup& group, Environment environment) {
    group.environment_ = std::move(environment);
  }
};

}  // namespace ddprun::worker
