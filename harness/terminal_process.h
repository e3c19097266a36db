// TerminalProcess: runs a real binary on a pseudo-terminal of the test's own
// (its stdout and stderr are the terminal, and it is the terminal's session
// leader, as a program started from a shell), and reads what it draws.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ddprun::harness {

class TerminalProcess {
 public:
  // Starts `argv` with the current environment plus `env` on a terminal of
  // `columns` x `rows`.
  TerminalProcess(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                  unsigned short columns = 100, unsigned short rows = 30) {
    winsize size{rows, columns, 0, 0};
    termios mode{};
    ::cfmakeraw(&mode);  // the test reads exactly the bytes written ('\n' stays '\n')
    pid_ = ::forkpty(&master_, nullptr, &mode, &size);
    if (pid_ < 0) throw std::runtime_error("forkpty failed");
    if (pid_ == 0) {
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::fcntl(master_, F_SETFD, FD_CLOEXEC);
  }
  ~TerminalProcess() {
    if (!exitCode_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(master_);
  }
  TerminalProcess(const TerminalProcess&) = delete;
  TerminalProcess& operator=(const TerminalProcess&) = delete;

  // Reads until `needle` has appeared (from `from` on); false after `timeout`.
  bool waitFor(const std::string& needle, std::chrono::milliseconds timeout, std::size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (screen_.find(needle, from) == std::string::npos) {
      if (!readSome(deadline)) return false;
    }
    return true;
  }
  // Everything read so far.
  const std::string& text() const { return screen_; }

  // Resizes the terminal: the kernel sends SIGWINCH to its foreground group.
  void resize(unsigned short columns, unsigned short rows) {
    winsize size{rows, columns, 0, 0};
    ::ioctl(master_, TIOCSWINSZ, &size);
  }

  // Reads to the end and waits for exit; the exit code, or nullopt.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exitCode_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exitCode_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      readSome(
          std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
    }
    // What it wrote before it exited (a terminal gives EIO once drained).
    while (readSome(std::chrono::steady_clock::now() + std::chrono::milliseconds(100))) {
    }
    return exitCode_;
  }

 private:
  bool readSome(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{master_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) <= 0) {
      return false;
    }
    char buffer[65536];
    const ssize_t n = ::read(master_, buffer, sizeof buffer);
    if (n <= 0) return false;
    screen_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int master_ = -1;
  std::string screen_;
  std::optional<int> exitCode_;
};

}  // namespace ddprun::harness
