#include "fanin_benchmark.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "monotonic_clock.h"
#include "relay_hosts.h"
#include "server_process.h"

namespace ddprun::bench {

namespace {

// --- the TCPStore protocol, client side (1.13 or 2.2+ dialect) -------------------

struct Opcodes {
  std::uint8_t set, get, add, wait, multiGet;
};
constexpr Opcodes kV1Opcodes{0, 2, 3, 5, 0xFF};  // PyTorch 1.13/2.0 (no MULTI_GET)
constexpr Opcodes kV2Opcodes{1, 3, 4, 6, 10};    // PyTorch 2.2+: VALIDATE took 0
constexpr std::uint8_t kValidateOpcode = 0;      // 2.2+ only, as is PING
constexpr std::uint8_t kPingOpcode = 13;
constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

void putU32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }
void putU64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<char*>(&v), 8); }
void putString(std::string& out, const std::string& s) {
  putU64(out, s.size());
  out += s;
}
std::string add(const Opcodes& op, const std::string& key, std::int64_t delta) {
  std::string out(1, static_cast<char>(op.add));
  putString(out, key);
  putU64(out, static_cast<std::uint64_t>(delta));
  return out;
}
std::string set(const Opcodes& op, const std::string& key, const std::string& value) {
  std::string out(1, static_cast<char>(op.set));
  putString(out, key);
  putString(out, value);
  return out;
}
std::string wait(const Opcodes& op, const std::string& key) {
  std::string out(1, static_cast<char>(op.wait));
  putU64(out, 1);
  putString(out, key);
  return out;
}
// WAIT on several keys, or MULTI_GET of them: the opcode, u64 n, n keys.
std::string keysRequest(std::uint8_t opcode, const std::vector<std::string>& keys) {
  std::string out(1, static_cast<char>(opcode));
  putU64(out, keys.size());
  for (const auto& key : keys) putString(out, key);
  return out;
}
std::string get(const Opcodes& op, const std::string& key) {
  std::string out(1, static_cast<char>(op.get));
  putString(out, key);
  return out;
}
// What a PyTorch 2.x client sends first (TCPStore's constructor: validate(),
// then ping()); the server answers only the PING, echoing its nonce.
std::string validateAndPing(std::uint32_t nonce) {
  std::string out(1, static_cast<char>(kValidateOpcode));
  putU32(out, kValidateMagic);
  out += static_cast<char>(kPingOpcode);
  putU32(out, nonce);
  return out;
}

// One rank's way through init_process_group.
enum class Step {
  kConnecting,
  kPing,  // 2.2+ dialect only
  kInitAdd,
  kWaitRank0,
  kGetRank0,
  kWaitIds,  // NCCL's scalable init: every root's unique id
  kGetIds,
  kBarrierAdd,
  kWaitLast,
  kDone
};

struct Rank {
  int fd = -1;
  int rank = 0;
  Step step = Step::kConnecting;
  std::string out;  // bytes not yet written
  std::string in;   // reply bytes read so far
  std::size_t idsLeft = 0;
};

struct ClientJob {
  std::string host;
  std::uint16_t port = 0;
  int first = 0;
  int count = 0;
  int total = 0;
  int sources = 8;
  int window = 128;
  FaninDialect dialect = FaninDialect::kV1;
  std::int64_t deadlineNs = 0;
  // Through relays (nodes > 0): rank r reaches RelayHosts::address(r /
  // ranksPerNode) at RelayHosts::kRelayPort.
  int nodes = 0;
  int ranksPerNode = 1;
  // NCCL's scalable init instead of rank 0's one id: every 128th rank
  // SETs its unique id and every rank WAITs for and MULTI_GETs them all.
  bool scalable = false;
};

constexpr int kRanksPerRoot = 128;           // TORCH_NCCL_RANKS_PER_ROOT's default
constexpr std::size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId)

const char kRank0Key[] = "/default_pg/rank0_address";
const char kBarrierKey[] = "/default_pg/store_based_barrier_key:1";
const char kLastKey[] = "/default_pg/store_based_barrier_key:1/last_worker";

class Clients {
 public:
  explicit Clients(const ClientJob& job)
      : job_(job),
        ops_(job.dialect == FaninDialect::kV2 ? kV2Opcodes : kV1Opcodes),
        ranks_(static_cast<std::size_t>(job.count)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < job.count; ++i) ranks_[static_cast<std::size_t>(i)].rank = job.first + i;
    if (job.scalable) {
      const int roots = (job.total + kRanksPerRoot - 1) / kRanksPerRoot;
      for (int i = 0; i < roots; ++i)
        idKeys_.push_back(fmt::format("/default_pg/UniqueNCCLID:{}", i));
      waitIds_ = keysRequest(ops_.wait, idKeys_);
      getIds_ = keysRequest(ops_.multiGet, idKeys_);
    }
  }
  ~Clients() {
    for (auto& r : ranks_) {
      if (r.fd >= 0) ::close(r.fd);
    }
    ::close(epoll_);
  }

  // Runs until every rank is done or the deadline; returns the ranks done.
  int run() {
    std::vector<epoll_event> events(1024);
    while (done_ < job_.count && monotonicNs() < job_.deadlineNs) {
      while (inFlight_ < job_.window && next_ < job_.count) connectNext();
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
      for (int i = 0; i < n; ++i) {
        Rank& r = ranks_[events[static_cast<std::size_t>(i)].data.u32];
        if (r.step == Step::kDone) continue;
        if (r.step == Step::kConnecting) {
          int error = 0;
          socklen_t length = sizeof(error);
          ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &error, &length);
          if (error != 0) {
            retry(r);
            continue;
          }
          if (job_.dialect == FaninDialect::kV2) {
            r.step = Step::kPing;
            send(r, validateAndPing(static_cast<std::uint32_t>(r.rank)));
          } else {
            r.step = Step::kInitAdd;
            send(r, add(ops_, "init/", 1));
          }
          continue;
        }
        if ((events[static_cast<std::size_t>(i)].events & EPOLLOUT) != 0) flush(r);
        if ((events[static_cast<std::size_t>(i)].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
          readReplies(r);
        }
      }
    }
    return done_;
  }

 private:
  void connectNext() {
    Rank& r = ranks_[static_cast<std::size_t>(next_++)];
    open(r);
    ++inFlight_;
  }

  void open(Rank& r) {
    r.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    const int one = 1;
    ::setsockopt(r.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    ::setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(0x7F000001u + static_cast<std::uint32_t>(r.rank % job_.sources));
    ::bind(r.fd, reinterpret_cast<sockaddr*>(&source), sizeof(source));
    sockaddr_in server{};
    server.sin_family = AF_INET;
    if (job_.nodes > 0) {
      server.sin_port = htons(RelayHosts::kRelayPort);
      server.sin_addr.s_addr = htonl(RelayHosts::address(r.rank / job_.ranksPerNode));
    } else {
      server.sin_port = htons(job_.port);
      ::inet_pton(AF_INET, job_.host.c_str(), &server.sin_addr);
    }
    r.step = Step::kConnecting;
    r.in.clear();
    r.out.clear();
    if (::connect(r.fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) != 0 &&
        errno != EINPROGRESS) {
      throw std::runtime_error(fmt::format("connect: {}", std::strerror(errno)));
    }
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT;
    event.data.u32 = static_cast<std::uint32_t>(r.rank - job_.first);
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, r.fd, &event);
  }

  // A refused or reset connection is tried again, as PyTorch's client does.
  void retry(Rank& r) {
    ::close(r.fd);
    open(r);
  }

  void send(Rank& r, const std::string& bytes) {
    r.out += bytes;
    flush(r);
  }

  void flush(Rank& r) {
    while (!r.out.empty()) {
      const ssize_t n = ::write(r.fd, r.out.data(), r.out.size());
      if (n < 0) break;  // EAGAIN: EPOLLOUT comes back
      r.out.erase(0, static_cast<std::size_t>(n));
    }
    epoll_event event{};
    event.events = r.out.empty() ? std::uint32_t{EPOLLIN} : std::uint32_t{EPOLLIN | EPOLLOUT};
    event.data.u32 = static_cast<std::uint32_t>(r.rank - job_.first);
    ::epoll_ctl(epoll_, EPOLL_CTL_MOD, r.fd, &event);
  }

  void readReplies(Rank& r) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(r.fd, buffer, sizeof(buffer));
      if (n > 0) {
        r.in.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        throw std::runtime_error(fmt::format("the server closed rank {}'s connection", r.rank));
      }
      break;
    }
    while (advance(r)) {
    }
  }

  // Consumes one reply if it is complete and sends the next request; false
  // when more bytes are needed.
  bool advance(Rank& r) {
    const auto i64 = [&](std::int64_t& v) {
      if (r.in.size() < 8) return false;
      std::memcpy(&v, r.in.data(), 8);
      r.in.erase(0, 8);
      return true;
    };
    switch (r.step) {
      case Step::kPing: {
        if (r.in.size() < 4) return false;
        std::uint32_t nonce = 0;
        std::memcpy(&nonce, r.in.data(), 4);
        if (nonce != static_cast<std::uint32_t>(r.rank)) {
          throw std::runtime_error(fmt::format("rank {}'s PING came back as {}", r.rank, nonce));
        }
        r.in.erase(0, 4);
        --inFlight_;  // its first reply
        send(r, add(ops_, "init/", 1));
        r.step = Step::kInitAdd;
        return true;
      }
      case Step::kInitAdd: {
        std::int64_t v = 0;
        if (!i64(v)) return false;
        if (job_.dialect == FaninDialect::kV1) --inFlight_;  // its first reply
        if (job_.scalable) {
          send(r, (r.rank % kRanksPerRoot == 0
                       ? set(ops_, idKeys_[static_cast<std::size_t>(r.rank / kRanksPerRoot)],
                             std::string(kUniqueIdBytes, 'i'))
                       : std::string()) +
                      waitIds_);
          r.step = Step::kWaitIds;
          return true;
        }
        if (r.rank == 0) {
          send(r, set(ops_, kRank0Key, "127.0.0.1:29500") + add(ops_, kBarrierKey, 1));
          r.step = Step::kBarrierAdd;
        } else {
          send(r, wait(ops_, kRank0Key));
          r.step = Step::kWaitRank0;
        }
        return true;
      }
      case Step::kWaitRank0:
        if (r.in.empty()) return false;
        r.in.erase(0, 1);
        send(r, get(ops_, kRank0Key));
        r.step = Step::kGetRank0;
        return true;
      case Step::kGetRank0: {
        if (r.in.size() < 8) return false;
        std::uint64_t length = 0;
        std::memcpy(&length, r.in.data(), 8);
        if (r.in.size() < 8 + length) return false;
        r.in.erase(0, 8 + length);
        send(r, add(ops_, kBarrierKey, 1));
        r.step = Step::kBarrierAdd;
        return true;
      }
      case Step::kWaitIds:
        if (r.in.empty()) return false;
        r.in.erase(0, 1);
        send(r, getIds_);
        r.step = Step::kGetIds;
        r.idsLeft = idKeys_.size();
        return true;
      case Step::kGetIds: {
        // The values, one after another: each read as soon as it is whole.
        while (r.idsLeft > 0) {
          if (r.in.size() < 8) return false;
          std::uint64_t length = 0;
          std::memcpy(&length, r.in.data(), 8);
          if (r.in.size() < 8 + length) return false;
          if (length != kUniqueIdBytes) {
            throw std::runtime_error(fmt::format("rank {} read an id of {} bytes", r.rank, length));
          }
          r.in.erase(0, 8 + length);
          --r.idsLeft;
        }
        send(r, add(ops_, kBarrierKey, 1));
        r.step = Step::kBarrierAdd;
        return true;
      }
      case Step::kBarrierAdd: {
        std::int64_t v = 0;
        if (!i64(v)) return false;
        send(r,
             (v == job_.total ? set(ops_, kLastKey, "1") : std::string()) + wait(ops_, kLastKey));
        r.step = Step::kWaitLast;
        return true;
      }
      case Step::kWaitLast:
        if (r.in.empty()) return false;
        r.in.erase(0, 1);
        r.step = Step::kDone;
        ++done_;
        return false;
      default:
        return false;
    }
  }

  ClientJob job_;
  Opcodes ops_;
  std::vector<std::string> idKeys_;
  std::string waitIds_;
  std::string getIds_;
  std::vector<Rank> ranks_;
  int epoll_ = -1;
  int next_ = 0;
  int inFlight_ = 0;
  int done_ = 0;
};

// Raises the descriptor limit as far as this process may (root: up to
// fs.nr_open), before the server and the clients are started.
void raiseDescriptorLimit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  rlimit wanted{1 << 20, 1 << 20};
  if (::setrlimit(RLIMIT_NOFILE, &wanted) != 0) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

struct Child {
  pid_t pid = -1;
  int start = -1;   // parent writes one byte: go
  int result = -1;  // child writes "done finishNs"
};

// Where the ranks go: the store itself (no node ports), or their nodes'
// relays; and which init they run.
struct RunShape {
  int nodes = 0;
  int ranksPerNode = 1;
  bool scalable = false;
};

FaninResult oneRun(const std::string& serverName, const ServerProcess& server, int total,
                   const FaninOptions& options, const RunShape& shape = {}) {
  std::vector<Child> children;
  rlimit descriptors{};
  ::getrlimit(RLIMIT_NOFILE, &descriptors);
  const long perProcess = std::max<long>(1, static_cast<long>(descriptors.rlim_cur) - 128);
  const int processes = std::max({1, std::min(options.processes, total),
                                  static_cast<int>((total + perProcess - 1) / perProcess)});
  const std::int64_t limitNs = std::chrono::nanoseconds(options.limit).count();
  for (int p = 0; p < processes; ++p) {
    int start[2];
    int result[2];
    if (::pipe2(start, O_CLOEXEC) != 0 || ::pipe2(result, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    ClientJob job;
    job.host = server.host();
    job.port = server.port();
    job.first = total * p / processes;
    job.count = total * (p + 1) / processes - job.first;
    job.total = total;
    job.sources = options.sources;
    job.window = options.window;
    job.dialect = options.dialect;
    job.nodes = shape.nodes;
    job.ranksPerNode = shape.ranksPerNode;
    job.scalable = shape.scalable;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(start[1]);
      ::close(result[0]);
      char go = 0;
      if (::read(start[0], &go, 1) != 1) ::_exit(1);
      std::string report;
      try {
        job.deadlineNs = monotonicNs() + limitNs;
        Clients clients(job);
        const int done = clients.run();
        report = fmt::format("{} {}\n", done, monotonicNs());
      } catch (const std::exception& e) {
        report = fmt::format("-1 0 {}\n", e.what());
      }
      if (::write(result[1], report.data(), report.size()) < 0) ::_exit(1);
      ::_exit(0);
    }
    ::close(start[0]);
    ::close(result[1]);
    children.push_back({pid, start[1], result[0]});
  }
  const double cpuBefore = processCpuSeconds(server.pid());
  const std::int64_t started = monotonicNs();
  for (auto& c : children) {
    if (::write(c.start, "g", 1) != 1) throw std::runtime_error("a client process is gone");
  }
  FaninResult out;
  out.server = serverName;
  out.ranks = total;
  std::int64_t finished = started;
  bool failed = false;
  for (auto& c : children) {
    std::string text;
    char buffer[512];
    pollfd p{c.result, POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(limitNs / 1'000'000) + 10'000) > 0) {
      const ssize_t n = ::read(c.result, buffer, sizeof(buffer));
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    int done = -1;
    long long finishNs = 0;
    if (std::sscanf(text.c_str(), "%d %lld", &done, &finishNs) != 2 || done < 0) {
      failed = true;
    } else {
      out.ranksDone += done;
      finished = std::max<std::int64_t>(finished, finishNs);
    }
    if (done < 0 && !text.empty()) std::fprintf(stderr, "  client process: %s", text.c_str());
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
    ::close(c.start);
    ::close(c.result);
  }
  out.completed = !failed && out.ranksDone == total;
  out.seconds = static_cast<double>(finished - started) / 1e9;
  out.serverCpuSeconds = processCpuSeconds(server.pid()) - cpuBefore;
  return out;
}

}  // namespace

namespace {

ServerCommand ddprunStoreCommand(const std::filesystem::path& daemonPath, bool open) {
  ServerCommand command;
  command.name = "ddprun-rendezvous";
  command.argv = {daemonPath.string(),
                  "--host",
                  "127.0.0.1",
                  "--port",
                  "0",
                  "--max-connections",
                  "1048576",
                  "--max-connections-per-address",
                  "1048576"};
  if (open) command.argv.push_back("--open");
  // NCCL's scalable init at 98,304 ranks: each node's WAIT on 768 ids and
  // the values in flight pass the default 512 MiB of buffers.
  command.argv.insert(command.argv.end(), {"--max-buffered-bytes", "8589934592"});
  command.env = {{"DDPRUN_LOG_LEVEL", "warn"}};
  if (!open) command.env.emplace_back("DDPRUN_TOKEN", "fanin-benchmark-token");
  return command;
}

}  // namespace

std::vector<FaninResult> runFaninBenchmark(const FaninOptions& options,
                                           const std::filesystem::path& daemonPath,
                                           const std::filesystem::path& benchPath,
                                           std::ostream& log) {
  raiseDescriptorLimit();
  std::vector<FaninResult> results;
  std::vector<std::pair<std::string, ServerCommand>> servers;
  const ServerCommand ddprun = ddprunStoreCommand(daemonPath, true);
  servers.emplace_back("ddprun store", ddprun);
  if (options.reference && !options.referenceCommand.empty()) {
    ServerCommand reference;
    reference.name = options.referenceName;
    reference.argv = options.referenceCommand;
    servers.emplace_back(options.referenceName, reference);
  } else if (options.reference && options.dialect == FaninDialect::kV1) {
    ServerCommand legacy;
    legacy.name = "c10d::TCPStore (LibTorch 1.13)";
    legacy.argv = {benchPath.string(), "c10d-server"};
    servers.emplace_back(options.referenceName, legacy);
  } else if (options.reference) {
    log << "  " << options.referenceName
        << ": not run: LibTorch 1.13's server speaks only the 1.13 dialect (give "
           "--reference-command for a 2.x server)\n";
  }
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  for (const auto& [name, command] : servers) {
    for (int n : options.ranks) {
      // One server process holds every rank's connection.
      if (static_cast<rlim_t>(n) + 256 > limit.rlim_cur) {
        log << fmt::format(
            "  {}: {} ranks: skipped: a server needs {} descriptors and this machine allows a "
            "process {} (RLIMIT_NOFILE; raising it needs CAP_SYS_RESOURCE)\n",
            name, n, n + 256, static_cast<unsigned long long>(limit.rlim_cur));
        FaninResult skipped;
        skipped.server = name;
        skipped.ranks = n;
        skipped.skipped = true;
        results.push_back(skipped);
        continue;
      }
      ServerProcess server;
      server.start(command);
      FaninResult r = oneRun(name, server, n, options);
      server.stop();
      log << fmt::format("  {}: {} ranks: {}\n", name, n,
                         r.completed ? fmt::format("{:.2f} s", r.seconds)
                                     : fmt::format("{} of {} done within {} s", r.ranksDone, n,
                                                   options.limit.count()));
      results.push_back(r);
      if (!r.completed) break;  // larger counts will not complete either
    }
  }
  return results;
}

void printFaninTable(const std::vector<FaninResult>& results, const FaninOptions& options,
                     std::ostream& out) {
  for (const auto& r : results) {
    if (r.server == "ddprun store" && r.completed) {
      out << fmt::format("ranks={} seconds={:.3f}\n", r.ranks, r.seconds);
    }
  }
  out << fmt::format(
      "\nFan-in: N ranks connect, ADD init/, GET rank 0's key, barrier (TCPStore {} "
      "protocol)\n\n| ranks | ddprun store | {} | ratio |\n|---:|---:|---:|---:|\n",
      options.dialect == FaninDialect::kV2 ? "2.2+" : "1.13", options.referenceName);
  std::vector<int> counts;
  for (const auto& r : results) {
    if (std::find(counts.begin(), counts.end(), r.ranks) == counts.end()) counts.push_back(r.ranks);
  }
  for (int n : counts) {
    const FaninResult* ours = nullptr;
    const FaninResult* theirs = nullptr;
    for (const auto& r : results) {
      if (r.ranks != n) continue;
      (r.server == "ddprun store" ? ours : theirs) = &r;
    }
    const auto cell = [](const FaninResult* r) {
      if (r == nullptr) return std::string("not run");
      if (r->skipped) return std::string("skipped (descriptor limit)");
      return r->completed ? fmt::format("{:.2f} s", r->seconds)
                          : fmt::format("{} of {} in limit", r->ranksDone, r->ranks);
    };
    const std::string ratio = ours && theirs && ours->completed && theirs->completed
                                  ? fmt::format("{:.1f}x", theirs->seconds / ours->seconds)
                                  : "-";
    out << fmt::format("| {} | {} | {} | {} |\n", n, cell(ours), cell(theirs), ratio);
  }
}

namespace {

// One run through relays: a fresh store, `n / ranksPerNode` relays that
// have joined it, then the ranks.
FaninResult relayRun(int n, bool scalable, const FaninOptions& options,
                     const std::filesystem::path& daemonPath) {
  ServerProcess server;
  server.start(ddprunStoreCommand(daemonPath, false));
  const int nodes = (n + options.ranksPerNode - 1) / options.ranksPerNode;
  const long long overflowsBefore = listenOverflows();
  RelayHosts hosts;
  hosts.start(nodes, options.ranksPerNode, server.host(), server.port(), "fanin-benchmark-token",
              options.limit, options.addWindow);
  const long long overflowsAfter = listenOverflows();
  RunShape shape;
  shape.nodes = nodes;
  shape.ranksPerNode = options.ranksPerNode;
  shape.scalable = scalable;
  FaninOptions v2 = options;
  v2.dialect = FaninDialect::kV2;  // current PyTorch's clients
  const double relayCpuBefore = hosts.cpuSeconds();
  FaninResult r = oneRun("ddprun store through relays", server, n, v2, shape);
  r.relayCpuSeconds = hosts.cpuSeconds() - relayCpuBefore;
  r.scenario = scalable ? "scalable init" : "init";
  r.relays = nodes;
  r.relayProcesses = hosts.processes();
  r.listenOverflows =
      overflowsBefore >= 0 && overflowsAfter >= 0 ? overflowsAfter - overflowsBefore : -1;
  const RelayHosts::Totals totals = hosts.totals();
  r.workerRequests = totals.requests;
  r.upstreamRequests = totals.upstreamRequests;
  r.coalesced = totals.coalesced;
  r.addsCombined = totals.addsCombined;
  r.bytesSaved = totals.bytesSaved;
  hosts.stop();
  server.stop();
  return r;
}

}  // namespace

std::vector<FaninResult> runRelayFaninBenchmark(const FaninOptions& options,
                                                const std::filesystem::path& daemonPath,
                                                std::ostream& log) {
  raiseDescriptorLimit();
  std::vector<FaninResult> results;
  for (int n : options.ranks) {
    for (const bool scalable : {false, true}) {
      if (scalable && n > options.scalableMaxRanks) {
        log << fmt::format("  scalable init at {} ranks: not run (over --scalable-max-ranks {})\n",
                           n, options.scalableMaxRanks);
        continue;
      }
      FaninResult r = relayRun(n, scalable, options, daemonPath);
      log << fmt::format(
          "  through {} relays ({} processes), {}: {} ranks: {} (store CPU {:.2f} s, relays' CPU "
          "{:.2f} s; listen overflows while they connected: {})\n",
          r.relays, r.relayProcesses, r.scenario, n,
          r.completed
              ? fmt::format("{:.2f} s", r.seconds)
              : fmt::format("{} of {} done within {} s", r.ranksDone, n, options.limit.count()),
          r.serverCpuSeconds, r.relayCpuSeconds, r.listenOverflows);
      results.push_back(r);
    }
  }
  // The flat path, side by side with the reference, at the largest size one
  // server process can hold here.
  FaninOptions v2 = options;
  v2.dialect = FaninDialect::kV2;
  std::vector<std::pair<std::string, ServerCommand>> servers = {
      {"ddprun store", ddprunStoreCommand(daemonPath, true)}};
  if (options.reference && !options.referenceCommand.empty()) {
    ServerCommand reference;
    reference.name = options.referenceName;
    reference.argv = options.referenceCommand;
    servers.emplace_back(options.referenceName, reference);
  }
  for (const auto& [name, command] : servers) {
    ServerProcess server;
    server.start(command);
    FaninResult r = oneRun(name, server, options.flatRanks, v2);
    server.stop();
    r.scenario = "flat";
    log << fmt::format("  {}: flat, {} ranks: {} (server CPU {:.2f} s)\n", name, options.flatRanks,
                       r.completed ? fmt::format("{:.2f} s", r.seconds) : "not completed",
                       r.serverCpuSeconds);
    results.push_back(r);
  }
  return results;
}

void printRelayFaninTable(const std::vector<FaninResult>& results, const FaninOptions& options,
                          std::ostream& out) {
  for (const auto& r : results) {
    if (r.scenario == "flat" || !r.completed) continue;
    out << fmt::format("ranks={} seconds={:.3f} scenario=\"{}\" root_cpu_seconds={:.3f}\n", r.ranks,
                       r.seconds, r.scenario, r.serverCpuSeconds);
  }
  out << fmt::format(
      "\nThrough node relays: {} ranks per node, one relay each (the agent's relay code), "
      "current PyTorch's TCPStore protocol\n\n"
      "| scenario | ranks | relays | seconds | store CPU s | store CPU per rank (us) | relays' "
      "CPU s | worker requests | upstream requests | shared reads | ADDs combined | reply bytes "
      "saved | listen overflows |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
      "|\n",
      options.ranksPerNode);
  for (const auto& r : results) {
    if (r.scenario == "flat") continue;
    out << fmt::format(
        "| {} | {} | {} | {} | {:.2f} | {:.1f} | {:.2f} | {} | {} | {} | {} | {} | {} |\n",
        r.scenario, r.ranks, r.relays,
        r.completed ? fmt::format("{:.2f}", r.seconds)
                    : fmt::format("{} of {} done", r.ranksDone, r.ranks),
        r.serverCpuSeconds, r.serverCpuSeconds * 1e6 / r.ranks, r.relayCpuSeconds, r.workerRequests,
        r.upstreamRequests, r.coalesced, r.addsCombined, r.bytesSaved, r.listenOverflows);
  }
  out << "\nFlat (every rank connects to the store), the same traffic (init):\n\n"
         "| server | ranks | seconds | server CPU s | CPU per rank (us) |\n"
         "|---|---:|---:|---:|---:|\n";
  for (const auto& r : results) {
    if (r.scenario != "flat") continue;
    out << fmt::format("| {} | {} | {} | {:.2f} | {:.1f} |\n", r.server, r.ranks,
                       r.completed ? fmt::format("{:.2f}", r.seconds) : "not completed",
                       r.serverCpuSeconds, r.serverCpuSeconds * 1e6 / r.ranks);
  }
}

}  // namespace ddprun::bench
