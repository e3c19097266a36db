#include "endpoint.h"

#include <arpa/inet.h>

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::launcher {

namespace {

bool isIpv6Literal(const std::string& text) {
  in6_addr address{};
  return ::inet_pton(AF_INET6, text.c_str(), &address) == 1;
}

// Host names, IPv4 addresses: letters, digits, '-', '.', '_'.
bool isHostName(const std::string& text) {
  return !text.empty() && text.size() <= 253 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

void checkHost(const std::string& option, const std::string& text, const std::string& host,
               bool bracketed) {
  if (host.empty()) {
    throw ConfigError(fmt::format("--{}={} has no host; give HOST[:PORT], e.g. --{}=node1:29400",
                                  option, text, option));
  }
  if (bracketed ? !isIpv6Literal(host) : !isHostName(host)) {
    throw ConfigError(fmt::format(
        "--{}={}: '{}' is not a host name or {} address; give e.g. node1, 10.0.0.1 or [::1]",
        option, text, host, bracketed ? "IPv6" : "IPv4"));
  }
}

}  // namespace

Endpoint parseEndpoint(const std::string& option, const std::string& text,
                       std::uint16_t defaultPort, bool allowPortZero) {
  Endpoint endpoint;
  std::string port;
  bool hasPort = false;
  if (!text.empty() && text.front() == '[') {  // [v6] or [v6]:port
    const std::size_t close = text.find(']');
    if (close == std::string::npos) {
      throw ConfigError(fmt::format("--{}={} has an unclosed '['; give e.g. --{}=[::1]:29400",
                                    option, text, option));
    }
    endpoint.host = text.substr(1, close - 1);
    const std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        throw ConfigError(
            fmt::format("--{}={}: '{}' after ']' is not :PORT; give e.g. --{}=[{}]:29400", option,
                        text, rest, option, endpoint.host));
      }
      hasPort = true;
      port = rest.substr(1);
    }
    checkHost(option, text, endpoint.host, true);
  } else {
    const std::size_t colons = static_cast<std::size_t>(std::count(text.begin(), text.end(), ':'));
    if (colons > 1) {
      throw ConfigError(fmt::format(
          "--{}={}: an IPv6 address needs brackets; give e.g. --{}=[{}]:{}", option, text, option,
          isIpv6Literal(text) ? text : text.substr(0, text.rfind(':')), defaultPort));
    }
    const std::size_t colon = text.find(':');
    endpoint.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      hasPort = true;
      port = text.substr(colon + 1);
    }
    checkHost(option, text, endpoint.host, false);
  }
  if (!hasPort) {
    endpoint.port = defaultPort;
    return endpoint;
  }
  const auto value = parseInteger(port);
  const long long min = allowPortZero ? 0 : 1;
  if (port.empty() || !value || *value < min || *value > 65535) {
    throw ConfigError(fmt::format("--{}={}: '{}' is not a port from {} to 65535; give e.g. --{}={}",
                                  option, text, port, min, option,
                                  hostPort(endpoint.host, defaultPort)));
  }
  endpoint.port = static_cast<std::uint16_t>(*value);
  return endpoint;
}

std::string parseHost(const std::string& option, const std::string& text) {
  if (!text.empty() && text.front() == '[') {
    if (text.back() != ']') {
      throw ConfigError(
          fmt::format("--{}={} is not an address: give a host without a port, e.g. --{}=[::1]",
                      option, text, option));
    }
    const std::string host = text.substr(1, text.size() - 2);
    checkHost(option, text, host, true);
    return host;
  }
  if (isIpv6Literal(text)) return text;
  if (text.find(':') != std::string::npos) {
    throw ConfigError(fmt::format(
        "--{}={} is not an address: give a host without a port (the port has its own option)",
        option, text));
  }
  checkHost(option, text, text, false);
  return text;
}

}  // namespace ddprun::launcher
