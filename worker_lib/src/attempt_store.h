// The store a process group bootstraps through: ddprun's store when ddprun
// (or spawn()) launched this process, else one that rank 0 hosts at
// MASTER_ADDR:MASTER_PORT (a SLURM or torchrun job without ddprun), always
// authenticated with DDPRUN_TOKEN and always under the attempt's prefix.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ddprun/rendezvous/store.h"
#include "ddprun/worker/environment.h"

namespace ddprun::worker {

// Returns the attempt's store with `groupPrefix` appended to its prefix, or
// nullptr for a single process. Throws ConfigError when no token is set,
// TimeoutError/NetworkError when the store cannot be reached in `timeout`.
std::shared_ptr<rendezvous::Store> connectAttemptStore(const Environment& environment,
                                                       const std::string& groupPrefix,
                                                       std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
