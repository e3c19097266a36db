#include "ddprun/agent/workers/python_zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/read.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/proc_info.h"
#include "ddprun/common/signal_names.h"
#include "fd_wait.h"
#include "preload_zygote_source.h"

namespace ddprun::agent {

namespace asio = boost::asio;

namespace {

// The longest one fork request may take (the zygote forks a large process:
// milliseconds; a stuck one is given up).
constexpr int kRequestTimeoutMs = 30'000;
// Ready zygotes in a row that could not fork before ddprun gives up on them.
constexpr int kMaxUnusable = 3;
// The longest reply ddprun reads from a zygote.
constexpr std::uint32_t kMaxReply = 64 * 1024;
// The most module names taken from the program's imports, and the most
// reports of them a launch.
constexpr std::size_t kMaxLearned = 20'000;
constexpr int kMaxReports = 1;

// A dotted Python module name ("lightning.pytorch"), nothing else: the list
// is read from a file the workers wrote.
bool isModuleName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name.front() == '.' || name.back() == '.' ||
      std::isdigit(static_cast<unsigned char>(name.front()))) {
    return false;
  }
  char previous = 0;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
    if (c == '.' && previous == '.') return false;
    previous = c;
  }
  return true;
}

std::string describe(const ExitStatus& status) {
  return status.signaled ? fmt::format("killed by {}", signalName(status.signal))
                         : fmt::format("exit code {}", status.code);
}

// Sends `data`, the descriptors with its first byte; "" or what went wrong.
std::string sendAll(int fd, const std::string& data, const std::vector<int>& fds,
                    std::chrono::steady_clock::time_point deadline) {
  std::size_t sent = 0;
  bool first = true;
  while (sent < data.size()) {
    if (!waitFor(fd, POLLOUT, deadline)) return "it did not take the request in time";
    iovec iov{const_cast<char*>(data.data() + sent), data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::array<char, CMSG_SPACE(sizeof(int) * 4)> control{};
    if (first && !fds.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* header = CMSG_FIRSTHDR(&msg);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return std::strerror(errno);
    }
    first = false;
    sent += static_cast<std::size_t>(n);
  }
  return "";
}

// Reads exactly `size` bytes; "" or what went wrong.
std::string readAll(int fd, char* data, std::size_t size,
                    std::chrono::steady_clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    if (!waitFor(fd, POLLIN, deadline)) return "it did not answer in time";
    const ssize_t n = ::recv(fd, data + got, size - got, MSG_DONTWAIT);
    if (n == 0) return "it closed its socket";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return std::strerror(errno);
    }
    got += static_cast<std::size_t>(n);
  }
  return "";
}

// A message: its body's length (4 bytes, big-endian), then the body.
std::string frame(const std::string& body) {
  std::string message(4, '\0');
  const auto size = static_cast<std::uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) message[i] = static_cast<char>((size >> (24 - 8 * i)) & 0xff);
  return message + body;
}

std::vector<std::string> splitFields(const std::vector<char>& body) {
  std::vector<std::string> fields(1);
  for (char c : body) {
    if (c == '\0') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::uint32_t bigEndian(const char* bytes) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

}  // namespace

PythonZygote::PythonZygote(asio::io_context& io, OrphanGuard& guard, Settings settings,
                           FatalFn onFatal)
    : io_(io),
      guard_(guard),
      settings_(std::move(settings)),
      onFatal_(std::move(onFatal)),
      forker_([this](const ForkRequest& request) { return fork(request); }),
      zygoteEnv_(settings_.env.begin(), settings_.env.end()) {
  std::ofstream file(settings_.scriptPath, std::ios::binary | std::ios::trunc);
  file << kPreloadZygoteSource;
  file.close();
  if (!file) {
    throw Error(fmt::format("cannot write the preload zygote's program to {}",
                            settings_.scriptPath.string()));
  }
  start();
}

PythonZygote::~PythonZygote() {
  stopping_ = true;
  life_.reset();
  socket_.reset();  // the zygote exits at the end of its socket
  notices_.reset();
  if (process_) {
    process_->signalGroup(SIGKILL);
    guard_.unwatch(process_->pid());
    guard_.forgetChild(process_->pid());
    // Never a blocking wait (a zygote in uninterruptible sleep on a hung
    // file system must not keep ddprun from exiting): reaped if already
    // dead, else by init once ddprun is gone.
    ::waitpid(process_->pid(), nullptr, WNOHANG);
  }
}

void PythonZygote::start() {
  ready_ = false;
  readyOnce_ = false;
  counted_ = false;
  tainted_ = false;
  life_ = std::make_shared<int>(0);
  int pair[2];
  int notices[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw Error(
        fmt::format("cannot start the preload zygote: socketpair: {}", std::strerror(errno)));
  }
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, notices) != 0) {
    ::close(pair[0]);
    ::close(pair[1]);
    throw Error(
        fmt::format("cannot start the preload zygote: socketpair: {}", std::strerror(errno)));
  }
  const auto& command = settings_.command;
  const bool module = command.size() > 3 && command[2] == "-m";
  std::vector<std::string> argv = {command.at(0),
                                   "-u",
                                   settings_.scriptPath.string(),
                                   std::to_string(pair[1]),
                                   std::to_string(::getpid()),
                                   module ? "module" : "script",
                                   command.at(module ? 3 : 2),
                                   modulesArgument(),
                                   settings_.automatic ? "auto" : "strict",
                                   fmt::format("{}", fmt::join(excluded_, ","))};
  SpawnOptions options;
  options.outputToAgentStderr = true;
  options.passFd = pair[1];
  try {
    process_ = std::make_unique<WorkerProcess>(io_, argv, settings_.env, CpuPlacement{}, options);
  } catch (...) {
    for (int fd : {pair[0], pair[1], notices[0], notices[1]}) ::close(fd);
    throw;
  }
  ::close(pair[1]);
  guard_.watch(process_->pid());
  guard_.keepChild(process_->pid());
  // The zygote's first request carries the socket it speaks on by itself.
  const std::string problem =
      sendAll(pair[0], frame("notices"), {notices[1]},
              std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs));
  ::close(notices[1]);
  socket_ = std::make_unique<asio::local::stream_protocol::socket>(
      io_, asio::local::stream_protocol(), pair[0]);
  notices_ = std::make_unique<asio::local::stream_protocol::socket>(
      io_, asio::local::stream_protocol(), notices[0]);
  DDPRUN_DEBUG(
      "Preload zygote (pid {}) is importing {}.", process_->pid(),
      settings_.automatic ? "torch (auto)" : fmt::format("{}", fmt::join(settings_.modules, ", ")));
  std::weak_ptr<int> alive = life_;
  process_->waitForExit([this, alive](ExitStatus status) {
    if (alive.lock()) onExit(status);
  });
  if (!problem.empty()) {
    discard("it did not take its first request: " + problem);
    return;
  }
  readNotice();
}

std::string PythonZygote::modulesArgument() const {
  if (!settings_.automatic) return fmt::format("{}", fmt::join(settings_.modules, ","));
  if (learned_.empty()) return "";
  std::ofstream file(settings_.modulesPath, std::ios::trunc);
  for (const auto& name : learned_) file << name << '\n';
  file.close();
  return file ? "@" + settings_.modulesPath.string() : "";
}

void PythonZygote::readNotice() {
  notice_.assign(4, 0);
  std::weak_ptr<int> alive = life_;
  asio::async_read(*notices_, asio::buffer(notice_), [this, alive](auto ec, std::size_t) {
    if (ec || !alive.lock()) return;  // a dead zygote: onExit decides
    const std::uint32_t size = bigEndian(notice_.data());
    if (size > kMaxReply) return discard("it sent an oversized message");
    notice_.assign(size, 0);
    asio::async_read(*notices_, asio::buffer(notice_), [this, alive](auto ec2, std::size_t) {
      if (ec2 || !alive.lock()) return;
      onNotice(splitFields(notice_));
      if (alive.lock() && notices_) readNotice();
    });
  });
}

void PythonZygote::onNotice(const std::vector<std::string>& fields) {
  const std::string& kind = fields[0];
  auto field = [&fields](std::size_t i) { return i < fields.size() ? fields[i] : std::string(); };
  if (kind == "fatal") {
    if (everReady_) return discard(field(1));  // a replacement: the job runs on
    if (settings_.automatic) return withoutZygote(field(1));
    fatal_ = true;
    waiting_.clear();
    onFatal_(fatalReport(field(1)));
    return;
  }
  if (kind == "skipped" && settings_.automatic) {
    excluded_.insert(field(1));
    DDPRUN_WARN(
        "Preloading left out '{}': importing it in the zygote failed ({}); workers import it "
        "themselves.",
        field(1), field(2));
    return;
  }
  if (kind == "tainted" && settings_.automatic) {
    const std::string& name = field(1);
    excluded_.insert(name);
    if (name == "torch") return withoutZygote(fmt::format("importing torch {}", field(2)));
    DDPRUN_WARN(
        "Preloading left out '{}': importing it {}, which a forked worker cannot inherit; "
        "workers import it themselves, and the zygote is rebuilt without it.",
        name, field(2));
    tainted_ = true;
    ready_ = false;
    notices_.reset();  // the zygote exits once its socket closes; onExit starts the next
    return;
  }
  if (kind == "learned") {
    DDPRUN_INFO(
        "Preloaded {} more modules the program imported, in {} s; restarted workers are forked "
        "with them.",
        field(1), field(2));
    return;
  }
  if (kind != "ready") return discard("it sent '" + kind + "', not ready");
  ready_ = true;
  readyOnce_ = true;
  everReady_ = true;
  if (settings_.automatic) {
    DDPRUN_INFO("Preloaded torch{} in {} s (zygote pid {}); workers are forked from it.",
                learned_.empty()
                    ? ""
                    : fmt::format(" and {} modules the program imported", learned_.size()),
                field(1), process_->pid());
  } else {
    DDPRUN_INFO("Preloaded {} in {} s (zygote pid {}); workers are forked from it.",
                fmt::join(settings_.modules, ", "), field(1), process_->pid());
  }
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& then : waiting) then();
}

std::string PythonZygote::fatalReport(const std::string& why) const {
  return fmt::format("ddprun: error: --preload {}: {}\n", fmt::join(settings_.modules, ","), why);
}

void PythonZygote::withoutZygote(const std::string& why) {
  DDPRUN_WARN("Python workers are started without a preload zygote: {}.", why);
  gaveUp_ = true;
  ready_ = false;
  notices_.reset();
  socket_.reset();
  if (process_) process_->signalGroup(SIGKILL);
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& then : waiting) then();
}

void PythonZygote::whenReady(std::function<void()> then) {
  if (ready_ || gaveUp_) {
    then();
  } else if (!fatal_) {
    waiting_.push_back(std::move(then));
  }
}

void PythonZygote::onExit(ExitStatus status) {
  if (stopping_ || !process_) return;
  const pid_t pid = process_->pid();
  guard_.unwatch(pid);
  guard_.forgetChild(pid);
  const bool wasReady = readyOnce_;
  process_.reset();
  socket_.reset();
  notices_.reset();
  ready_ = false;
  if (fatal_ || gaveUp_) return;
  if (tainted_) {
    // auto: rebuilt without the module that made it unsafe (excluded_).
    try {
      start();
    } catch (const std::exception& e) {
      withoutZygote(e.what());
    }
    return;
  }
  if (!everReady_) {
    // The first zygote never got ready: the preload itself is broken.
    const std::string why = fmt::format(
        "the preload zygote (pid {}) ended ({}) before it had imported {}", pid, describe(status),
        settings_.automatic ? "torch" : fmt::format("{}", fmt::join(settings_.modules, ", ")));
    if (settings_.automatic) return withoutZygote(why);
    fatal_ = true;
    waiting_.clear();
    onFatal_(fatalReport(fmt::format("{}; run `{} -c 'import {}'` to see why", why,
                                     settings_.command.at(0), fmt::join(settings_.modules, ", "))));
    return;
  }
  if (!wasReady && !counted_) ++unusableInARow_;  // a replacement that died importing
  if (unusableInARow_ >= kMaxUnusable) {
    giveUp(
        fmt::format("the preload zygote (pid {}) ended ({}); {} zygotes in a row could not "
                    "fork a worker",
                    pid, describe(status), unusableInARow_));
    return;
  }
  DDPRUN_WARN("The preload zygote (pid {}) ended ({}); starting a new one.", pid, describe(status));
  try {
    start();
  } catch (const std::exception& e) {
    giveUp(e.what());
  }
}

void PythonZygote::giveUp(const std::string& why) {
  gaveUp_ = true;
  DDPRUN_WARN("{}; ddprun starts workers without a zygote from now on.", why);
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& then : waiting) then();
}

void PythonZygote::discard(const std::string& why) {
  if (!process_) return;
  if (!counted_) ++unusableInARow_;
  counted_ = true;
  DDPRUN_WARN(
      "The preload zygote (pid {}) cannot fork workers: {}; ddprun starts them without "
      "it until a new zygote is ready.",
      process_->pid(), why);
  ready_ = false;
  socket_.reset();
  notices_.reset();
  process_->signalGroup(SIGKILL);  // onExit starts the next one
}

std::optional<std::vector<std::string>> PythonZygote::ask(const std::string& body,
                                                          const std::vector<int>& fds) {
  const std::string message = frame(body);
  const int fd = socket_->native_handle();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  std::string problem = sendAll(fd, message, fds, deadline);
  char header[4];
  std::vector<char> reply;
  if (problem.empty()) problem = readAll(fd, header, sizeof header, deadline);
  if (problem.empty()) {
    const std::uint32_t length = bigEndian(header);
    if (length > kMaxReply) {
      problem = "it sent an oversized reply";
    } else {
      reply.assign(length, 0);
      problem = readAll(fd, reply.data(), reply.size(), deadline);
    }
  }
  if (!problem.empty()) {
    discard(problem);
    return std::nullopt;
  }
  return splitFields(reply);
}

void PythonZygote::learnProgramImports() {
  // The hook reports once a launch (a worker could report more).
  if (!settings_.automatic || reports_ >= kMaxReports) return;
  ++reports_;
  std::ifstream file(settings_.learnedPath);
  const std::set<std::string> known(learned_.begin(), learned_.end());
  std::vector<std::string> names;  // the new ones
  for (std::string name; std::getline(file, name) && learned_.size() < kMaxLearned;) {
    if (isModuleName(name) && !known.contains(name)) {
      names.push_back(name);
      learned_.push_back(name);
    }
  }
  if (names.empty()) return;
  if (!ready_ || !socket_) return;  // a zygote being built gets them at its next start
  std::string body = "learn";
  for (const auto& name : names) body += '\0' + name;
  const auto reply = ask(body, {});
  if (reply && (*reply)[0] == "ok" && reply->size() == 2) {
    DDPRUN_DEBUG("The preload zygote imports {} of the program's {} modules in the background.",
                 (*reply)[1], names.size());
  } else if (reply && (*reply)[0] == "error" && reply->size() == 4 && (*reply)[1] == "tainted") {
    onNotice({"tainted", (*reply)[2], (*reply)[3]});
  }
}

std::optional<pid_t> PythonZygote::fork(const ForkRequest& request) {
  if (!ready_ || !socket_) return std::nullopt;
  std::string body = "spawn";
  auto field = [&body](const std::string& value) {
    body += '\0';
    body += value;
  };
  char cwd[4096];
  field(::getcwd(cwd, sizeof cwd) ? cwd : ".");
  std::string cpus;
  for (int cpu : request.placement.cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu);
  field(cpus);
  field(std::to_string(request.placement.memoryNode));
  field(std::to_string(request.argv.size()));
  for (const auto& arg : request.argv) field(arg);
  // The environment as a change of the zygote's: entries to set, then
  // names to remove.
  std::vector<const std::string*> set;
  std::set<std::string> kept;
  for (const auto& entry : request.env) {
    kept.insert(entry.substr(0, entry.find('=')));
    if (!zygoteEnv_.contains(entry)) set.push_back(&entry);
  }
  field(std::to_string(set.size()));
  for (const auto* entry : set) field(*entry);
  for (const auto& entry : settings_.env) {
    const std::string name = entry.substr(0, entry.find('='));
    if (!kept.contains(name)) field(name);
  }
  std::vector<int> fds = {request.stdoutFd, request.stderrFd, request.reportFd};
  int cgroupFd = -1;
  if (!request.placement.cgroup.empty()) {
    cgroupFd = ::open(request.placement.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cgroupFd >= 0) fds.push_back(cgroupFd);
  }
  const auto reply = ask(body, fds);
  if (cgroupFd >= 0) ::close(cgroupFd);
  if (!reply) return std::nullopt;
  const auto& fields = *reply;
  if (fields[0] == "ok" && fields.size() == 2) {
    pid_t pid = 0;
    try {
      pid = static_cast<pid_t>(std::stol(fields[1]));
    } catch (const std::exception&) {
    }
    // Only a child of this agent may be treated as a worker: a bad pid
    // would be signalled and waited for.
    const auto stat = pid > 1 ? readProcStat(pid) : std::nullopt;
    if (stat && stat->parent == ::getpid()) {
      unusableInARow_ = 0;
      return pid;
    }
    discard(fmt::format("it answered pid {}, which is not a child of ddprun", fields[1]));
    return std::nullopt;
  }
  if (fields[0] == "error" && fields.size() == 4 && fields[1] == "tainted") {
    // auto: an import it learned made it unsafe (its notice may be unread).
    onNotice({"tainted", fields[2], fields[3]});
    return std::nullopt;
  }
  discard(fields.size() > 1 ? fields[1] : "it sent a malformed reply");
  return std::nullopt;
}

PythonZygote::Settings zygoteSettings(const AgentConfig& config,
                                      const std::map<std::string, std::string>& baseEnv,
                                      const std::filesystem::path& runDirectory) {
  PythonZygote::Settings settings;
  settings.command = config.command;
  settings.automatic = config.preloadMode == PreloadMode::kAuto;
  settings.modules = config.preload;
  settings.scriptPath = runDirectory / "preload_zygote.py";
  settings.learnedPath = runDirectory / "preload_learned.txt";
  settings.modulesPath = runDirectory / "preload_modules.txt";
  auto env = baseEnv;
  for (const auto& [key, value] : config.extraEnv) env[key] = value;
  // The progress hook reads it in the zygote; a worker's environment is an
  // exec'd one's and has not got it.
  if (settings.automatic) env[env::kPreloadLearn] = settings.learnedPath.string();
  // Whether CUDA is available, asked at import, from NVML instead of the
  // driver's cuInit (which a forked worker could not use); the workers'
  // own environment does not have them.
  for (const char* check : {"PYTORCH_NVML_BASED_CUDA_CHECK", "TRITON_NVML_BASED_CUDA_CHECK"}) {
    env.emplace(check, "1");
  }
  for (const auto& [key, value] : env) settings.env.push_back(key + "=" + value);
  return settings;
}

}  // namespace ddprun::agent
