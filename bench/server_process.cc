#include "server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iostream>

#include "ddprun/common/error.h"

extern char** environ;

namespace ddprun::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kListeningPrefix = "listening on ";

int remainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left + 1, 0, 1 << 30));
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return fmt::format("ended with status {}", status);
}

// The environment of this process with `extra` added or replaced, as
// "NAME=value" strings.
std::vector<std::string> childEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view item(*entry);
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const auto& kv) {
      return item.size() > kv.first.size() && item.starts_with(kv.first) &&
             item[kv.first.size()] == '=';
    });
    if (!replaced) env.emplace_back(item);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

ServerProcess::~ServerProcess() { stop(); }

void ServerProcess::start(const ServerCommand& command, std::chrono::milliseconds timeout) {
  stop();
  name_ = command.name;
  // Everything the child needs is built before fork(): between fork and exec
  // only async-signal-safe calls are allowed (the benchmark has threads).
  std::vector<std::string> argvStrings = command.argv;
  std::vector<std::string> envStrings = childEnvironment(command.env);
  std::vector<char*> argv = pointers(argvStrings);
  std::vector<char*> envp = pointers(envStrings);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(fmt::format("cannot create a pipe for {}: {}", name_, std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(fmt::format("cannot fork to start {}: {}", name_, std::strerror(err)));
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);  // dup2 clears close-on-exec on the copy
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(126);  // the benchmark is already gone
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  pid_ = pid;
  stdoutFd_ = fds[0];

  const std::string line = readFirstLine(Clock::now() + timeout);
  const auto colon = line.rfind(':');
  std::uint16_t port = 0;
  const char* portEnd = line.data() + line.size();
  if (!line.starts_with(kListeningPrefix) || colon == std::string::npos ||
      std::from_chars(line.data() + colon + 1, portEnd, port).ptr != portEnd || port == 0) {
    stop();
    throw Error(fmt::format("{} printed '{}' instead of 'listening on HOST:PORT'", name_, line));
  }
  host_ = line.substr(kListeningPrefix.size(), colon - kListeningPrefix.size());
  port_ = port;
}

std::string ServerProcess::readFirstLine(Clock::time_point deadline) {
  std::string line;
  for (;;) {
    const auto newline = line.find('\n');
    if (newline != std::string::npos) return line.substr(0, newline);
    pollfd p{stdoutFd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, remainingMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      stop();
      throw TimeoutError(fmt::format("{} did not print its 'listening on' line in time", name_));
    }
    char buffer[256];
    const ssize_t n = ::read(stdoutFd_, buffer, sizeof(buffer));
    if (n > 0) {
      line.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // End of output before a line: the server failed to start.
    reap(Clock::now() + std::chrono::seconds(5));
    const std::string how = running() ? "closed its output" : describeStatus(exitStatus_);
    stop();
    throw Error(fmt::format("{} {} before it listened (see its messages above)", name_, how));
  }
}

bool ServerProcess::reap(Clock::time_point deadline) {
  if (pid_ <= 0) return true;
  // A pidfd turns "wait for the exit with a deadline" into one poll().
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    while (::poll(&p, 1, remainingMs(deadline)) < 0 && errno == EINTR) {
    }
    ::close(pidfd);
  }
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(pid_, &status, pidfd >= 0 ? WNOHANG : 0);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != pid_ && !(reaped < 0 && errno == ECHILD)) return false;
  exitStatus_ = status;
  pid_ = -1;
  return true;
}

void ServerProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    if (!reap(Clock::now() + grace)) {
      std::cerr << fmt::format(
          "ddprun-bench: {} did not stop within {} ms of SIGTERM; killing it\n", name_,
          grace.count());
      ::kill(pid_, SIGKILL);
      reap(Clock::time_point::max());
    } else if (!(WIFEXITED(exitStatus_) && WEXITSTATUS(exitStatus_) == 0) &&
               !(WIFSIGNALED(exitStatus_) && WTERMSIG(exitStatus_) == SIGTERM)) {
      std::cerr << fmt::format("ddprun-bench: {} {} when stopped\n", name_,
                               describeStatus(exitStatus_));
    }
  }
  if (stdoutFd_ >= 0) {
    ::close(stdoutFd_);
    stdoutFd_ = -1;
  }
}

}  // namespace ddprun::bench
