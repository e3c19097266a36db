#include "ddprun/agent/rounds/network_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>

namespace ddprun::agent {

std::optional<std::string> interfaceWithAddress(const std::string& address) {
  in_addr v4{};
  in6_addr v6{};
  const bool isV4 = ::inet_pton(AF_INET, address.c_str(), &v4) == 1;
  const bool isV6 = !isV4 && ::inet_pton(AF_INET6, address.c_str(), &v6) == 1;
  if (!isV4 && !isV6) return std::nullopt;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (isV4 && family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if (a->sin_addr.s_addr == v4.s_addr) found = i->ifa_name;
    } else if (isV6 && family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (std::memcmp(&a->sin6_addr, &v6, sizeof(v6)) == 0) found = i->ifa_name;
    }
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace ddprun::agent
