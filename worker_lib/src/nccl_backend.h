// The NCCL backend: CUDA tensors, one device per rank (cuda:LOCAL_RANK
// modulo the visible devices). Rank 0 creates the unique id and publishes
// it through the attempt's store. The communicator is non-blocking, so
// bootstrap and every wait() are bounded by the timeout: a failed or
// vanished peer aborts the communicator and throws, never hangs.
// Collectives run on the current CUDA stream of the device.
//
// Only built when CUDA and NCCL are found (DDPRUN_HAVE_NCCL).
#pragma once

#include <chrono>
#include <memory>

#include "collective_backend.h"

namespace ddprun::worker {

// The number of CUDA devices the runtime sees (0 without a driver/GPU).
int cudaDeviceCount();

std::unique_ptr<CollectiveBackend> makeNcclBackend(rendezvous::Store* store,
                                                   const Environment& environment,
                                                   std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
