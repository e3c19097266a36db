// httpGet and parseMetrics: what the tests read a /metrics endpoint with
// (the store's, a single node's agent's).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>

namespace ddprun::harness {

// One HTTP GET on 127.0.0.1:port (Connection: close): status line and body.
inline std::pair<std::string, std::string> httpGet(std::uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::write(fd, request.data(), request.size()) < 0) {
    ::close(fd);
    return {};
  }
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) reply.append(buffer, n);
  ::close(fd);
  const auto headerEnd = reply.find("\r\n\r\n");
  if (headerEnd == std::string::npos) return {reply, ""};
  return {reply.substr(0, reply.find("\r\n")), reply.substr(headerEnd + 4)};
}

// Prometheus text: "name{labels}" -> value (comments skipped).
inline std::map<std::string, double> parseMetrics(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

}  // namespace ddprun::harness
