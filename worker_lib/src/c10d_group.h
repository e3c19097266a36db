// What differs between the LibTorch versions ddprun::worker supports, in
// one place: the type of a c10d process group that runs collectives
// (LibTorch 1.13: c10d::ProcessGroup; 2.x: c10d::Backend, which the 2.x
// ProcessGroup dispatches to), and the NCCL and MPI groups when the linked
// LibTorch was built with them (USE_C10D_NCCL, USE_C10D_MPI).
//
// Thread-safety: the functions keep no state.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "ddprun/worker/environment.h"
#include "ddprun/worker/process_group.h"

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
// ProcessGroup that dispatches to `group` (of backend `kind`).
c10::intrusive_ptr<c10d::ProcessGroup> asProcessGroup(const C10dGroupPtr& group,
                                                      const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size, Backend kind);

// True when the linked LibTorch has ProcessGroupNCCL and a CUDA device is
// usable.
bool c10dNcclAvailable();
bool c10dNcclBuiltIn();

// LibTorch's ProcessGroupNCCL on this rank's device (LOCAL_RANK modulo the
// visible devices, made current); sets `device` ("cuda:N"). Throws
// ConfigError when the LibTorch has no NCCL.
C10dGroupPtr makeC10dNccl(const c10::intrusive_ptr<c10d::Store>& store,
                          const Environment& environment, int rank, int size,
                          std::chrono::milliseconds timeout, std::string& device);

// True when the linked LibTorch has ProcessGroupMPI.
bool c10dMpiAvailable();

// LibTorch's ProcessGroupMPI over `worldRanks` (ranks of MPI_COMM_WORLD;
// empty: all). Every rank of the world calls it; a rank outside
// `worldRanks` gets nullptr. Initialises MPI on first use. Throws
// ConfigError when the LibTorch has no MPI.
C10dGroupPtr makeC10dMpi(const std::vector<int>& worldRanks);

}  // namespace ddprun::worker
