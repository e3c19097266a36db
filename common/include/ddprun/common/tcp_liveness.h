// TCP liveness for long-lived connections: a peer that vanishes without a
// word (a cut cable, a switch port gone dark, a host that froze) is noticed
// by the kernel within a bound, instead of after the kernel's defaults (two
// hours of keep-alive, about 15 minutes of retransmissions).
//
// Thread-safety: a free function without shared state.
#pragma once

#include <chrono>

namespace ddprun {

// After `idle` without traffic the kernel probes the peer every `interval`;
// `probes` unanswered probes end the connection. TCP_USER_TIMEOUT = idle +
// interval x probes bounds unacknowledged writes the same way, so a
// connection to a silent peer fails with ETIMEDOUT within that bound either
// way. Best effort: an option this kernel lacks only weakens detection.
void setTcpLiveness(int fd, std::chrono::milliseconds idle, std::chrono::milliseconds interval,
                    int probes);

// The same for a connection whose peer must be counted lost after about
// `limit` of silence: half of it idle, then three probes in the other half.
void setTcpSilenceLimit(int fd, std::chrono::milliseconds limit);

}  // namespace ddprun
