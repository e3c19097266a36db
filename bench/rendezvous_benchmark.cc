#include "rendezvous_benchmark.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/protocol.h"
#include "ddprun_driver.h"
#include "server_process.h"

namespace ddprun::bench {

namespace protocol = rendezvous::protocol;
using Clock = std::chrono::steady_clock;

namespace {

// One simulated agent: a socket and the bytes read so far.
struct FakeNode {
  int fd = -1;
  std::string input;
  bool answered = false;
};

int connectTo(const std::string& host, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("rendezvous bench: connect failed");
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void sendAll(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("rendezvous bench: send failed");
    sent += static_cast<std::size_t>(n);
  }
}

// Reads until one whole frame is buffered; returns its status code.
std::uint8_t readFrame(FakeNode& node) {
  for (;;) {
    protocol::FrameHeader header;
    if (protocol::parseFrameHeader(node.input, 1 << 20, header) == protocol::ParseResult::kFrame) {
      node.input.erase(0, protocol::kHeaderSize + header.bodySize);
      return header.code;
    }
    char buffer[4096];
    const ssize_t n = ::recv(node.fd, buffer, sizeof(buffer), 0);
    if (n <= 0) throw std::runtime_error("rendezvous bench: the server closed a connection");
    node.input.append(buffer, static_cast<std::size_t>(n));
  }
}

double oneRound(const std::string& host, std::uint16_t port, const std::string& token, int n,
                int round) {
  // Every frame is encoded before the clock starts.
  std::string hello(protocol::kPreamble);
  protocol::encodeRequest(hello, 1, protocol::Hello{.token = token, .clientName = "bench-node"});
  std::vector<std::string> joins(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < joins.size(); ++i) {
    protocol::JoinRequest join;
    join.rdzvId = fmt::format("bench-{}-{}", n, round);
    join.nodeId = fmt::format("node-{}", i);
    join.localWorldSize = 8;
    join.minNodes = static_cast<std::uint32_t>(n);
    join.maxNodes = static_cast<std::uint32_t>(n);
    join.masterPort = 29500;
    join.timeoutMs = 60000;
    protocol::encodeRequest(joins[i], 2, join);
  }
  // The clock runs from the first node's connect, as for etcd (a node's
  // connection and handshake are part of what its agent waits for).
  const auto start = Clock::now();
  std::vector<FakeNode> nodes(static_cast<std::size_t>(n));
  for (auto& node : nodes) {
    node.fd = connectTo(host, port);
    sendAll(node.fd, hello);
  }
  for (auto& node : nodes) {
    if (readFrame(node) != 0) throw std::runtime_error("rendezvous bench: handshake refused");
  }
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = i;
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, nodes[i].fd, &event);
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) sendAll(nodes[i].fd, joins[i]);
  int answered = 0;
  std::vector<epoll_event> ready(1024);
  while (answered < n) {
    const int count = ::epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), 60000);
    if (count <= 0) throw std::runtime_error("rendezvous bench: no assignment within 60 s");
    for (int k = 0; k < count; ++k) {
      FakeNode& node = nodes[ready[static_cast<std::size_t>(k)].data.u64];
      if (node.answered) continue;
      if (readFrame(node) != 0) throw std::runtime_error("rendezvous bench: JOIN refused");
      node.answered = true;
      ++answered;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(epoll);
  for (auto& node : nodes) ::close(node.fd);
  return seconds;
}

}  // namespace

std::vector<RendezvousResult> runRendezvousBenchmark(const RendezvousBenchOptions& options,
                                                     const std::filesystem::path& daemonPath,
                                                     std::ostream& log) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  const std::string token = randomToken();
  std::vector<RendezvousResult> results;
  for (int n : options.nodes) {
    RendezvousResult result;
    result.nodes = n;
    // Per node: HELLO + JOIN sent, their two replies received.
    result.messagesPerNode = 4;
    for (int r = 0; r < options.repeat; ++r) {
      ServerProcess daemon;
      daemon.start(rendezvousCommand(daemonPath, token));
      const double seconds = oneRound(daemon.host(), daemon.port(), token, n, r);
      result.seconds.push_back(seconds);
      log << fmt::format("  {} nodes, run {} of {}: {:.1f} ms\n", n, r + 1, options.repeat,
                         seconds * 1000);
      daemon.stop();
    }
    results.push_back(result);
  }
  return results;
}

void printRendezvousTable(const std::vector<RendezvousResult>& results, std::ostream& out) {
  out << "\nRendezvous round: first node connects -> every node holds its assignment "
         "(one daemon, one load-generator thread, 8 workers per node)\n\n";
  out << "| nodes | median | runs | messages per node |\n|---:|---:|---|---:|\n";
  for (const auto& r : results) {
    auto sorted = r.seconds;
    std::sort(sorted.begin(), sorted.end());
    std::string runs;
    for (double s : r.seconds) runs += fmt::format("{}{:.1f}", runs.empty() ? "" : " ", s * 1000);
    out << fmt::format("| {} | {:.1f} ms | {} ms | {:.0f} |\n", r.nodes,
                       sorted[sorted.size() / 2] * 1000, runs, r.messagesPerNode);
  }
}

}  // namespace ddprun::bench
