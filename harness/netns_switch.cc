// netns-switch: the Ethernet switch between the tests' hosts (network
// namespaces, harness/host_network.h).
//
// It creates one TAP device per port (the harness moves each into a host's
// namespace) and forwards frames between them in user space as a learning
// switch does. On command it cuts a port off silently -- frames from and to
// it vanish, the link stays up, nothing is closed or reset, like a switch
// port gone dark -- and delays, jitters and drops frames on every port (what
// `tc qdisc netem` does; the kernel of the machines this suite runs on has no
// sch_netem). Each frame forwarded waits DELAY +- JITTER (uniform, so frames
// may be reordered, as with netem) and is lost with LOSS percent chance.
//
//   netns-switch TAP...        prints "ready" once every TAP exists
//   commands on stdin, one per line, each answered "ok" (or "error: ...") on stdout:
//     cut PORT | restore PORT | impair DELAY_MS JITTER_MS LOSS_PERCENT
//
// It exits when stdin closes or its parent dies; its TAP devices go with it.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Mac = std::array<unsigned char, 6>;

struct Impairment {
  std::chrono::microseconds delay{0};
  std::chrono::microseconds jitter{0};
  double loss = 0;  // 0..1
};

struct Pending {
  Clock::time_point due;
  std::uint64_t order;  // FIFO among frames due at the same instant
  std::size_t port;
  std::string frame;
  bool operator>(const Pending& o) const { return due != o.due ? due > o.due : order > o.order; }
};

int openTap(const std::string& name) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  ifreq request{};
  request.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(fd, TUNSETIFF, &request) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class Switch {
 public:
  explicit Switch(std::vector<int> taps) : taps_(std::move(taps)), cut_(taps_.size(), false) {}

  // Reads every frame waiting on `port` and queues its copies.
  void receive(std::size_t port) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(taps_[port], buffer, sizeof(buffer));
      if (n <= 0) return;
      if (n < 14 || cut_[port]) continue;
      std::string frame(buffer, static_cast<std::size_t>(n));
      Mac destination;
      Mac source;
      std::memcpy(destination.data(), buffer, 6);
      std::memcpy(source.data(), buffer + 6, 6);
      learned_[source] = port;
      const auto known = learned_.find(destination);
      const bool flood = (destination[0] & 1) != 0 || known == learned_.end();
      for (std::size_t out = 0; out < taps_.size(); ++out) {
        if (out == port || (!flood && out != known->second)) continue;
        forward(out, frame);
      }
    }
  }

  // Writes the frames that are due; returns the poll timeout until the next.
  int sendDue() {
    const auto now = Clock::now();
    while (!queue_.empty() && queue_.top().due <= now) {
      const Pending& p = queue_.top();
      // A full TAP queue drops the frame, as a congested port would.
      if (!cut_[p.port]) (void)!::write(taps_[p.port], p.frame.data(), p.frame.size());
      queue_.pop();
    }
    if (queue_.empty()) return -1;
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(queue_.top().due - now);
    return static_cast<int>(wait.count());
  }

  std::string command(const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "cut" || verb == "restore") {
      std::size_t port = 0;
      if (!(in >> port) || port >= taps_.size()) return "error: no such port";
      cut_[port] = verb == "cut";
      return "ok";
    }
    if (verb == "impair") {
      double delayMs = 0;
      double jitterMs = 0;
      double lossPercent = 0;
      if (!(in >> delayMs >> jitterMs >> lossPercent) || delayMs < 0 || jitterMs < 0 ||
          jitterMs > delayMs || lossPercent < 0 || lossPercent > 100) {
        return "error: impair DELAY_MS JITTER_MS LOSS_PERCENT (jitter at most the delay)";
      }
      impairment_ = {std::chrono::microseconds(static_cast<std::int64_t>(delayMs * 1000)),
                     std::chrono::microseconds(static_cast<std::int64_t>(jitterMs * 1000)),
                     lossPercent / 100};
      return "ok";
    }
    return "error: unknown command '" + verb + "'";
  }

 private:
  void forward(std::size_t port, const std::string& frame) {
    if (cut_[port]) return;
    if (impairment_.loss > 0 && uniform_(random_) < impairment_.loss) return;
    auto delay = impairment_.delay;
    if (impairment_.jitter.count() > 0) {
      delay += std::chrono::microseconds(static_cast<std::int64_t>(
          (uniform_(random_) * 2 - 1) * static_cast<double>(impairment_.jitter.count())));
    }
    if (delay.count() == 0 && queue_.empty()) {
      (void)!::write(taps_[port], frame.data(), frame.size());
      return;
    }
    queue_.push(Pending{Clock::now() + delay, order_++, port, frame});
  }

  std::vector<int> taps_;
  std::vector<bool> cut_;
  std::map<Mac, std::size_t> learned_;
  Impairment impairment_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> queue_;
  std::uint64_t order_ = 0;
  std::mt19937_64 random_{std::random_device{}()};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (argc < 2) {
    std::fprintf(stderr, "usage: netns-switch TAP...\n");
    return 2;
  }
  std::vector<int> taps;
  for (int i = 1; i < argc; ++i) {
    const int fd = openTap(argv[i]);
    if (fd < 0) {
      std::fprintf(stderr, "netns-switch: cannot create TAP device %s: %s\n", argv[i],
                   std::strerror(errno));
      return 1;
    }
    taps.push_back(fd);
  }
  Switch network(taps);
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<pollfd> fds;
  fds.push_back({STDIN_FILENO, POLLIN, 0});
  for (int fd : taps) fds.push_back({fd, POLLIN, 0});
  std::string input;
  for (;;) {
    const int timeout = network.sendDue();
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return 1;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) != 0) network.receive(i - 1);
    }
    if ((fds[0].revents & (POLLIN | POLLHUP)) != 0) {
      char buffer[4096];
      const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof(buffer));
      if (n <= 0) return 0;
      input.append(buffer, static_cast<std::size_t>(n));
      for (auto end = input.find('\n'); end != std::string::npos; end = input.find('\n')) {
        std::printf("%s\n", network.command(input.substr(0, end)).c_str());
        std::fflush(stdout);
        input.erase(0, end + 1);
      }
    }
  }
}
