#include "chaos_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace ddprun::chaos {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The signals slurmstepd sends every process of a step.
constexpr int kStepSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT};

// `path`'s bytes from `offset` on (none when it does not exist yet).
std::string readFrom(const fs::path& path, std::size_t& offset) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return "";
  file.seekg(static_cast<std::streamoff>(offset));
  std::string text((std::istreambuf_iterator<char>(file)), {});
  offset += text.size();
  return text;
}

// Writes `text` to `path` whole: a reader sees all of it or no file.
void writeWhole(const fs::path& path, const std::string& text) {
  const fs::path partial = path.string() + ".partial";
  std::ofstream(partial) << text;
  fs::rename(partial, path);
}

}  // namespace

int pidDescriptor(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

std::vector<pid_t> stillRunningAfter(const std::set<pid_t>& pids, std::chrono::milliseconds limit) {
  std::vector<pollfd> ends;
  std::map<int, pid_t> pidOf;
  for (pid_t pid : pids) {
    const int fd = pidDescriptor(pid);
    if (fd < 0) continue;  // gone already
    ends.push_back({fd, POLLIN, 0});
    pidOf[fd] = pid;
  }
  const auto deadline = Clock::now() + limit;
  while (!ends.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || ::poll(ends.data(), ends.size(), static_cast<int>(left.count())) <= 0)
      break;
    std::erase_if(ends, [](const pollfd& p) {
      if (p.revents == 0) return false;
      ::close(p.fd);
      return true;
    });
    for (auto& p : ends) p.revents = 0;
  }
  std::vector<pid_t> running;
  for (const auto& p : ends) {
    running.push_back(pidOf[p.fd]);
    ::close(p.fd);
  }
  return running;
}

StartedProcess::StartedProcess(std::unique_ptr<harness::ChildProcess> child)
    : child_(std::move(child)), ends_(pidDescriptor(child_->pid())) {}

StartedProcess::~StartedProcess() {
  if (ends_ >= 0) ::close(ends_);
}

void StartedProcess::watch(std::vector<pollfd>& fds) const {
  if (ended) return;
  for (int fd : {child_->stdoutFd(), child_->stderrFd(), ends_}) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
}

bool StartedProcess::poll() {
  if (ended) return false;
  out += child_->drainStdout();
  err += child_->drainStderr();
  const auto status = child_->wait(0ms);
  if (!status) return false;
  out += child_->stdoutText();
  err += child_->stderrText();
  ended = true;
  code = *status;
  death = child_->deathSignal();
  return true;
}

pid_t SupervisedProcess::pid() {
  if (pid_ == 0) std::ifstream(prefix_.string() + ".pid") >> pid_;
  return pid_;
}

void SupervisedProcess::deliver(int sig) {
  if (pid() > 0) ::kill(pid_, sig);
}

bool SupervisedProcess::poll() {
  if (ended) return false;
  out += readFrom(prefix_.string() + ".out", outRead_);
  err += readFrom(prefix_.string() + ".err", errRead_);
  std::ifstream status(prefix_.string() + ".status");
  std::string how;
  int value = 0;
  if (!(status >> how >> value)) return false;
  out += readFrom(prefix_.string() + ".out", outRead_);
  err += readFrom(prefix_.string() + ".err", errRead_);
  ended = true;
  death = how == "signal" ? value : 0;
  code = death != 0 ? 128 + death : value;
  return true;
}

void SupervisedProcess::killedBySlurm() {
  if (ended) return;
  out += readFrom(prefix_.string() + ".out", outRead_);
  err += readFrom(prefix_.string() + ".err", errRead_);
  ended = true;
  death = SIGKILL;
  code = 128 + SIGKILL;
  signalsSent.insert(SIGKILL);  // by Slurm: from outside
}

int supervise(const fs::path& prefix, const std::vector<std::string>& argv) {
  if (argv.empty()) return 2;
  for (int sig : kStepSignals) ::signal(sig, SIG_IGN);
  const pid_t child = ::fork();
  if (child < 0) return 127;
  if (child == 0) {
    for (int sig : kStepSignals) ::signal(sig, SIG_DFL);
    const int out = ::open((prefix.string() + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((prefix.string() + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  writeWhole(prefix.string() + ".pid", std::to_string(child));
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    writeWhole(prefix.string() + ".status", fmt::format("signal {}\n", sig));
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return 128 + sig;
  }
  writeWhole(prefix.string() + ".status", fmt::format("exit {}\n", WEXITSTATUS(status)));
  return WEXITSTATUS(status);
}

}  // namespace ddprun::chaos
