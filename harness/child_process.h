// ChildProcess: runs a real binary for integration tests, with its stdout
// and stderr captured through pipes, and bounded waits on everything.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
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

extern char** environ;

namespace ddprun::harness {

class ChildProcess {
 public:
  // Starts `argv` with the current environment plus/minus `env` entries
  // (an empty value removes the variable); with `pipeStdin`, its stdin is a
  // pipe that writeStdin() feeds (else it inherits ours).
  ChildProcess(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
               bool pipeStdin = false) {
    int out[2];
    int err[2];
    int in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        (pipeStdin && ::pipe2(in, O_CLOEXEC) != 0)) {
      throw std::runtime_error("pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (pipeStdin) posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    std::vector<std::string> envStrings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (!env.contains(name)) envStrings.push_back(entry);
    }
    for (const auto& [name, value] : env) {
      if (!value.empty()) envStrings.push_back(name + "=" + value);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : envStrings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    if (pipeStdin) ::close(in[0]);
    stdin_ = in[1];
    stdout_ = out[0];
    stderr_ = err[0];
    if (rc != 0) throw std::runtime_error("posix_spawn failed for " + argv[0]);
  }

  ~ChildProcess() {
    if (!exitStatus_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) ::close(stdin_);
    ::close(stdout_);
    ::close(stderr_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its stdout's and stderr's read ends, for poll() (read through the
  // methods below).
  int stdoutFd() const { return stdout_; }
  int stderrFd() const { return stderr_; }
  // Writes `text` to the child's stdin (constructed with pipeStdin).
  bool writeStdin(const std::string& text) {
    return stdin_ >= 0 &&
           ::write(stdin_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }
  void signal(int sig) { ::kill(pid_, sig); }

  // One line of stdout (without '\n'), or nullopt after `timeout`.
  std::optional<std::string> readStdoutLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto pos = outBuffer_.find('\n'); pos != std::string::npos) {
        std::string line = outBuffer_.substr(0, pos);
        outBuffer_.erase(0, pos + 1);
        return line;
      }
      if (!readSome(stdout_, outBuffer_, deadline)) return std::nullopt;
    }
  }

  // Waits for exit; returns the exit code (128+N for signal N) or nullopt.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exitStatus_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exitStatus_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (WIFSIGNALED(status)) deathSignal_ = WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exitStatus_;
  }

  // The signal that killed the child, after wait() saw it end; 0 when it
  // exited (an exit code of 128+N is no death by signal N).
  int deathSignal() const { return deathSignal_; }

  // Everything the child wrote to stderr (call after it exited).
  std::string stderrText() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (readSome(stderr_, errBuffer_, deadline)) {
    }
    return errBuffer_;
  }
  // Whatever is readable right now, without waiting.
  std::string drainStdout() { return drain(stdout_, outBuffer_); }
  std::string drainStderr() { return drain(stderr_, errBuffer_); }

  std::string stdoutText() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (readSome(stdout_, outBuffer_, deadline)) {
    }
    return outBuffer_;
  }

 private:
  static bool readSome(int fd, std::string& into, std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) <= 0) {
      return false;
    }
    char buffer[65536];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n <= 0) return false;
    into.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  static std::string drain(int fd, std::string& buffer) {
    while (readSome(fd, buffer, std::chrono::steady_clock::now())) {
    }
    std::string out;
    out.swap(buffer);
    return out;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  int stderr_ = -1;
  std::string outBuffer_;
  std::string errBuffer_;
  std::optional<int> exitStatus_;
  int deathSignal_ = 0;
};

}  // namespace ddprun::harness
