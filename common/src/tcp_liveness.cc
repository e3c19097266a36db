#include "ddprun/common/tcp_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

namespace ddprun {

namespace {

void setIntOption(int fd, int level, int name, int value) {
  (void)::setsockopt(fd, level, name, &value, sizeof(value));
}

// Keep-alive times are whole seconds, at least 1.
int wholeSeconds(std::chrono::milliseconds d) {
  return static_cast<int>(
      std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(d).count()));
}

}  // namespace

void setTcpLiveness(int fd, std::chrono::milliseconds idle, std::chrono::milliseconds interval,
                    int probes) {
  setIntOption(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
  setIntOption(fd, IPPROTO_TCP, TCP_KEEPIDLE, wholeSeconds(idle));
  setIntOption(fd, IPPROTO_TCP, TCP_KEEPINTVL, wholeSeconds(interval));
  setIntOption(fd, IPPROTO_TCP, TCP_KEEPCNT, std::max(1, probes));
  setIntOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT,
               static_cast<int>((idle + interval * std::max(1, probes)).count()));
}

void setTcpSilenceLimit(int fd, std::chrono::milliseconds limit) {
  const auto half = limit / 2;
  setTcpLiveness(fd, half, half / 3, 3);
}

}  // namespace ddprun
