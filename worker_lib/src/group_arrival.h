// Every rank of a new process group checks in before the group's backend
// connects: each announces itself in the group's store and waits, up to the
// group's timeout, until all of them have. A rank that never creates the
// group (it died, hangs elsewhere, or was given another world) is then a
// TimeoutError that names it, within the timeout and on every backend —
// where NCCL would otherwise wait in its communicator set-up, or (LibTorch
// 2.x, whose ProcessGroupNCCL connects lazily) return and let the first
// collective hang until the watchdog kills the rank.
//
// Thread-safety: a free function; the store must be the group's own.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace ddprun::worker {

// Announces `rank` of `size` under "arrival/" in `store` and returns once
// every rank has; throws TimeoutError naming the ranks that did not come
// when `timeout` passes first, NetworkError when the store fails. `what`
// names the group in the message ("the nccl group").
void awaitGroupArrival(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout,
                       const std::string& what);

}  // namespace ddprun::worker
