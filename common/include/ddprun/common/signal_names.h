// Signal names for messages ("SIGSEGV"), without relying on sigabbrev_np.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// "SIGTERM" for 15, "signal 63" for a number without a name.
std::string signalName(int sig);

// 15 for "SIGTERM", "sigterm" or "TERM"; nullopt for an unknown name.
std::optional<int> signalNumber(std::string_view name);

}  // namespace ddprun
