// The store a process group bootstraps through, as a c10d::Store under the
// attempt's prefix (so a restarted attempt never reads the keys of the one
// before it) and the group's:
//   - launched by ddprun (or spawn()): ddprun's store, native protocol,
//     authenticated with the worker credential in DDPRUN_TOKEN;
//   - not launched by ddprun but DDPRUN_TOKEN set (srun with a shared
//     secret): rank 0 hosts ddprun-rendezvous at MASTER_ADDR:MASTER_PORT;
//   - otherwise (torchrun, python -m torch.distributed.launch, plain srun):
//     PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT, hosted by torchrun's
//     agent when TORCHELASTIC_USE_AGENT_STORE=True, else by rank 0 - what
//     torch.distributed's env:// initialisation does.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "ddprun/worker/environment.h"

namespace ddprun::worker {

// Returns the store with `groupPrefix` under the attempt's prefix, or an
// empty pointer for a single process. Throws TimeoutError/NetworkError when
// the store cannot be reached in `timeout`.
c10::intrusive_ptr<c10d::Store> connectJobStore(const Environment& environment,
                                                const std::string& groupPrefix,
                                                std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
