// What differs between the LibTorch versions ddprun::worker supports, in
// one place: the type of a c10d process group that runs collectives
// (LibTorch 1.13: c10d::ProcessGroup; 2.x: c10d::Backend, which the 2.x
// ProcessGroup dispatches to), and the NCCL group when the linked LibTorch
// was built with it (USE_C10D_NCCL).
//
// Thread-safety: the functions keep no state.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "ddprun/worker/environment.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace ddprun::worker {

#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif
using C10dGroupPtr = c10::intrusive_ptr<C10dGroup>;

// The c10d::ProcessGroup that c10d's DDP pieces (Reducer,
// verify_params_across_processes) take: the group itself on 1.13; on 2.x a
// ProcessGroup that dispatches to `group` for `deviceType`.
c10::intrusive_ptr<c10d::ProcessGroup> asProcessGroup(const C10dGroupPtr& group,
                                                      const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size, bool nccl);

// True when the linked LibTorch has ProcessGroupNCCL and a CUDA device is
// usable.
bool c10dNcclAvailable();

// LibTorch's ProcessGroupNCCL on this rank's device (LOCAL_RANK modulo the
// visible devices, made current); sets `device` ("cuda:N"). Throws
// ConfigError when the LibTorch has no NCCL.
C10dGroupPtr makeC10dNccl(const c10::intrusive_ptr<c10d::Store>& store,
                          const Environment& environment, int rank, int size,
                          std::chrono::milliseconds timeout, std::string& device);

}  // namespace ddprun::worker
