// CollectiveCheck: the debug-mode comparison of collectives across ranks.
//
// Before collective number N, each rank publishes a description of it
// ("all_reduce(float32[4, 3] on cpu, sum)") under check/N/<rank> and reads
// every other rank's. A difference throws ddprun::Error naming both ranks'
// calls; a rank that does not arrive within the timeout throws TimeoutError
// naming it. Keys of collective N-2 are deleted (every rank has read them).
//
// Thread-safety: one call at a time (ProcessGroup serialises them).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun::rendezvous {
class Store;
}

namespace ddprun::worker {

class CollectiveCheck {
 public:
  CollectiveCheck(rendezvous::Store& store, int rank, int size, std::chrono::milliseconds timeout)
      : store_(store), rank_(rank), size_(size), timeout_(timeout) {}

  void check(const std::string& description);

 private:
  std::string key(std::int64_t sequence, int rank) const;

  rendezvous::Store& store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::int64_t sequence_ = 0;
};

}  // namespace ddprun::worker
