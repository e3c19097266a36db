// A TCP port that is free now on 127.0.0.1 (bind to port 0, read, close).
// Used only for MASTER_PORT in torchrun-1.13 mode, where worker rank 0 binds
// it itself; the small window before it does is the same as torchrun's.
#pragma once

#include <cstdint>

namespace ddprun::agent {

std::uint16_t findFreePort();

}  // namespace ddprun::agent
