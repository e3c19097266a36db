#include <fmt/format.h>

#include "c10d_group.h"
#include "ddprun/common/error.h"

#ifdef USE_C10D_MPI
#include <torch/csrc/distributed/c10d/ProcessGroupMPI.hpp>
#endif

namespace ddprun::worker {

bool c10dMpiAvailable() {
#ifdef USE_C10D_MPI
  return true;
#else
  return false;
#endif
}

C10dGroupPtr makeC10dMpi(const std::vector<int>& worldRanks) {
#ifdef USE_C10D_MPI
  // c10d initialises MPI (MPI_THREAD_SERIALIZED) and creates the
  // communicator; a rank outside `worldRanks` gets an empty pointer.
  return c10d::ProcessGroupMPI::createProcessGroupMPI(worldRanks);
#else
  (void)worldRanks;
  throw ConfigError(
      "the linked LibTorch has no MPI process group (Debian 12's LibTorch 1.13 is built without "
      "it; Debian 13's 2.6 has it); use gloo, or link a LibTorch built with MPI");
#endif
}

}  // namespace ddprun::worker
