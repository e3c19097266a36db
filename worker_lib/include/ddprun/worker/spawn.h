// spawn(nprocs, fn): runs fn(rank) in nprocs local processes with the
// environment a launcher would give them (RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_ADDR/PORT and a private ddprun store), like torch.multiprocessing
// .spawn — for tests and experiments without ddprun.
//
// The children are forked, so call spawn() before this process starts
// LibTorch's thread pools (at the top of main or of a test). Each child runs
// with OMP_NUM_THREADS=1 unless it is set, dies with the parent
// (PDEATHSIG), and exits 0 when fn returns, 1 when it throws (the message
// goes to stderr). When a child fails the others are stopped (SIGTERM,
// then SIGKILL after `stopGrace`) and spawn throws ddprun::Error naming the
// rank and how it ended.
//
// Example:
//   ddprun::worker::spawn(2, [](int rank) {
//     auto group = ddprun::worker::initProcessGroup();
//     ...
//   });
//
// Thread-safety: call from one thread at a time.
#pragma once

#include <chrono>
#include <functional>

namespace ddprun::worker {

struct SpawnOptions {
  std::chrono::milliseconds stopGrace{std::chrono::seconds(5)};
};

void spawn(int nprocs, const std::function<void(int rank)>& fn, SpawnOptions options = {});

}  // namespace ddprun::worker
