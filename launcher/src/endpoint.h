// Endpoint: strict parsing of HOST[:PORT] as torchrun's options take it.
//
// Accepted: "host", "host:port", "[v6]", "[v6]:port" (and a bare IPv6
// literal as a host with no port, e.g. --master_addr=::1). Refused, each
// with a ConfigError naming the option and the fix: an empty host, an IPv6
// address with a port but without brackets ("::1:29400"), text after ']'
// that is not ":port", an empty port ("host:"), a port that is not a number
// from 1 to 65535 (0 only where `allowPortZero`).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace ddprun::launcher {

struct Endpoint {
  std::string host;  // without brackets
  std::uint16_t port = 0;
};

Endpoint parseEndpoint(const std::string& option, const std::string& text,
                       std::uint16_t defaultPort, bool allowPortZero = false);

// A host alone (--master_addr, --local_addr): brackets are removed; a port
// or anything that cannot be a host name or address is refused.
std::string parseHost(const std::string& option, const std::string& text);

}  // namespace ddprun::launcher
