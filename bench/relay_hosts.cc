#include "relay_hosts.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>

#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "ddprun/rendezvous/node_relay.h"

namespace ddprun::bench {

namespace asio = boost::asio;

namespace {

bool writeAll(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, std::size_t size, int timeoutMs) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeoutMs) <= 0) return false;
    const ssize_t n = ::read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// One host process: its relays on one loop thread, as in an agent.
std::string dotted(std::uint32_t address) {
  return fmt::format("{}.{}.{}.{}", address >> 24, (address >> 16) & 0xFF, (address >> 8) & 0xFF,
                     address & 0xFF);
}

// `total`: every process's relays together (as one round's nodes, they
// spread their first connects as agents do).
[[noreturn]] void hostRelays(int first, int count, int total, const std::string& host,
                             std::uint16_t port, const std::string& token,
                             std::chrono::microseconds addWindow, int commands, int replies) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    asio::io_context io;
    std::vector<std::unique_ptr<rendezvous::NodeRelay>> relays;
    int ready = 0;
    std::string failure;
    for (int i = 0; i < count; ++i) {
      rendezvous::RelayOptions options;
      options.upstreamHost = host;
      options.upstreamPort = port;
      options.token = token;
      options.name = fmt::format("bench-relay-{}", first + i);
      options.listenHost = dotted(RelayHosts::address(first + i));
      options.listenPort = RelayHosts::kRelayPort;
      options.sourceHost = options.listenHost;
      options.addWindow = addWindow;
      options.connectSpread = rendezvous::relayConnectSpread(static_cast<std::uint32_t>(total));
      relays.push_back(
          std::make_unique<rendezvous::NodeRelay>(io, options, [&](const std::string& reason) {
            if (failure.empty()) failure = reason;
            io.stop();
          }));
    }
    for (auto& relay : relays) relay->start([&] { ++ready; });
    while (ready < count && failure.empty()) io.run_one();
    if (!failure.empty()) throw std::runtime_error(failure);
    const char ok = 'r';
    if (!writeAll(replies, &ok, 1)) ::_exit(1);
    // Serve until the parent asks for the counters (one byte) or hangs up.
    asio::posix::stream_descriptor command(io, commands);
    char byte = 0;
    asio::async_read(command, asio::buffer(&byte, 1),
                     [&](boost::system::error_code ec, std::size_t) {
                       if (ec) ::_exit(0);
                       std::uint64_t sums[5] = {0, 0, 0, 0, 0};
                       for (auto& relay : relays) {
                         const auto& c = relay->counters();
                         sums[0] += c.requests;
                         sums[1] += c.upstreamRequests;
                         sums[2] += c.coalesced;
                         sums[3] += c.addsCombined;
                         sums[4] += c.bytesSaved;
                       }
                       writeAll(replies, sums, sizeof(sums));
                       ::_exit(0);
                     });
    io.restart();
    io.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  relay host: %s\n", e.what());
  }
  ::_exit(1);
}

}  // namespace

void RelayHosts::start(int relays, int workersPerRelay, const std::string& host, std::uint16_t port,
                       const std::string& token, std::chrono::seconds limit,
                       std::chrono::microseconds addWindow) {
  rlimit descriptors{};
  ::getrlimit(RLIMIT_NOFILE, &descriptors);
  const long perRelay = 2 + workersPerRelay;
  const long fit = std::max<long>(1, (static_cast<long>(descriptors.rlim_cur) - 128) / perRelay);
  const int processes = static_cast<int>((relays + fit - 1) / fit);
  for (int p = 0; p < processes; ++p) {
    const int first = static_cast<int>(static_cast<long>(relays) * p / processes);
    const int count = static_cast<int>(static_cast<long>(relays) * (p + 1) / processes) - first;
    int command[2];
    int reply[2];
    if (::pipe2(command, O_CLOEXEC) != 0 || ::pipe2(reply, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(command[1]);
      ::close(reply[0]);
      hostRelays(first, count, relays, host, port, token, addWindow, command[0], reply[1]);
    }
    ::close(command[0]);
    ::close(reply[1]);
    pids_.push_back(pid);
    commands_.push_back(command[1]);
    replies_.push_back(reply[0]);
  }
  const int timeoutMs = static_cast<int>(limit.count() * 1000);
  for (std::size_t p = 0; p < replies_.size(); ++p) {
    char ready = 0;
    if (!readAll(replies_[p], &ready, 1, timeoutMs)) {
      stop();
      throw std::runtime_error(
          fmt::format("relay host {} did not get its relays accepted by the store", p));
    }
  }
}

RelayHosts::Totals RelayHosts::totals() {
  Totals totals;
  for (std::size_t p = 0; p < pids_.size(); ++p) {
    std::uint64_t sums[5] = {0, 0, 0, 0, 0};
    if (!writeAll(commands_[p], "c", 1) || !readAll(replies_[p], sums, sizeof(sums), 10000)) {
      continue;
    }
    totals.requests += sums[0];
    totals.upstreamRequests += sums[1];
    totals.coalesced += sums[2];
    totals.addsCombined += sums[3];
    totals.bytesSaved += sums[4];
  }
  return totals;
}

double RelayHosts::cpuSeconds() const {
  double seconds = 0;
  for (pid_t pid : pids_) seconds += processCpuSeconds(pid);
  return seconds;
}

void RelayHosts::stop() {
  for (pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  for (int fd : commands_) ::close(fd);
  for (int fd : replies_) ::close(fd);
  pids_.clear();
  commands_.clear();
  replies_.clear();
}

double processCpuSeconds(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3,
  // utime 14 and stime 15.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long long listenOverflows() {
  std::ifstream netstat("/proc/net/netstat");
  std::string names;
  std::string values;
  while (std::getline(netstat, names) && std::getline(netstat, values)) {
    if (names.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream n(names);
    std::istringstream v(values);
    std::string name;
    std::string value;
    while (n >> name && v >> value) {
      if (name == "ListenOverflows") return std::stoll(value);
    }
  }
  return -1;
}

}  // namespace ddprun::bench
