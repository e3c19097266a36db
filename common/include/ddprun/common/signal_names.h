// Signal names for messages ("SIGSEGV"), without relying on sigabbrev_np.
#pragma once

#include <string>

namespace ddprun {

// "SIGTERM" for 15, "signal 63" for a number without a name.
std::string signalName(int sig);

}  // namespace ddprun
