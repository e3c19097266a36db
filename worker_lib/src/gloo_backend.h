// The Gloo backend: CPU tensors over libgloo's TCP transport, bootstrapped
// through ddprun's store (GlooStore). Operations run on one worker thread in
// issue order, so the caller (e.g. DDP's gradient hooks) keeps computing
// while a bucket is reduced.
#pragma once

#include <chrono>
#include <memory>

#include "collective_backend.h"

namespace ddprun::worker {

// `store` is the attempt's store (nullptr for a single process); it is only
// used during construction. Throws TimeoutError when peers do not show up.
std::unique_ptr<CollectiveBackend> makeGlooBackend(rendezvous::Store* store,
                                                   const Environment& environment,
                                                   std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
