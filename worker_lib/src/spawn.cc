#include "ddprun/worker/spawn.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <vector>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/signal_names.h"
#include "hosted_daemon.h"

namespace ddprun::worker {

namespace {

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  return fmt::format("was killed by {}", signalName(WTERMSIG(status)));
}

[[noreturn]] void runChild(int rank, int nprocs, std::uint16_t port, const std::string& token,
                           const std::string& prefix, pid_t parent,
                           const std::function<void(int)>& fn) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  const std::map<std::string, std::string> variables = {
      {env::kRank, std::to_string(rank)},
      {env::kLocalRank, std::to_string(rank)},
      {env::kGroupRank, "0"},
      {env::kWorldSize, std::to_string(nprocs)},
      {env::kLocalWorldSize, std::to_string(nprocs)},
      {env::kMasterAddr, "127.0.0.1"},
      {env::kMasterPort, std::to_string(port)},
      {env::kRestartCount, "0"},
      {env::kStoreHost, "127.0.0.1"},
      {env::kStorePort, std::to_string(port)},
      {env::kStorePrefix, prefix},
      {env::kToken, token},
  };
  for (const auto& [name, value] : variables) ::setenv(name.c_str(), value.c_str(), 1);
  ::setenv(env::kOmpNumThreads, "1", 0);
  int code = 0;
  try {
    fn(rank);
  } catch (const std::exception& e) {
    std::cerr << "spawn: rank " << rank << " failed: " << e.what() << std::endl;
    code = 1;
  } catch (...) {
    std::cerr << "spawn: rank " << rank << " failed with an unknown exception" << std::endl;
    code = 1;
  }
  std::fflush(nullptr);
  ::_exit(code);
}

// Stops the children still running: SIGTERM, then SIGKILL after `grace`.
// Waits on pidfds, so it returns as soon as the last one is gone.
void stopOthers(std::map<pid_t, int>& running, std::chrono::milliseconds grace) {
  for (const auto& [pid, rank] : running) ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::map<pid_t, int> pidfds;
  for (const auto& [pid, rank] : running) {
    pidfds[pid] = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }
  while (!running.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    for (const auto& [pid, fd] : pidfds) fds.push_back({fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    for (const auto& pollFd : fds) {
      if (pollFd.revents == 0 && pollFd.fd >= 0) continue;
      for (auto it = pidfds.begin(); it != pidfds.end(); ++it) {
        if (it->second != pollFd.fd) continue;
        ::waitpid(it->first, nullptr, 0);
        running.erase(it->first);
        if (it->second >= 0) ::close(it->second);
        pidfds.erase(it);
        break;
      }
    }
  }
  for (const auto& [pid, rank] : running) ::kill(pid, SIGKILL);
  for (const auto& [pid, rank] : running) ::waitpid(pid, nullptr, 0);
  for (const auto& [pid, fd] : pidfds) {
    if (fd >= 0) ::close(fd);
  }
  running.clear();
}

}  // namespace

void spawn(int nprocs, const std::function<void(int rank)>& fn, SpawnOptions options) {
  if (nprocs < 1) throw ConfigError(fmt::format("spawn: nprocs={} must be at least 1", nprocs));
  static std::atomic<int> calls{0};
  const std::string token = randomToken();
  HostedDaemon daemon("127.0.0.1", 0, token);
  const std::string prefix = fmt::format("spawn/{}/{}/", ::getpid(), calls++);
  const pid_t parent = ::getpid();
  std::fflush(nullptr);  // children must not repeat buffered output
  std::map<pid_t, int> running;
  for (int rank = 0; rank < nprocs; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      stopOthers(running, options.stopGrace);
      throw Error("spawn: fork failed");
    }
    if (pid == 0) runChild(rank, nprocs, daemon.port(), token, prefix, parent, fn);
    running.emplace(pid, rank);
  }
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw Error("spawn: lost track of the child processes (waitpid failed)");
    }
    if (running.count(pid) == 0) continue;  // not a rank (e.g. the store daemon)
    const int rank = running.at(pid);
    running.erase(pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    stopOthers(running, options.stopGrace);
    throw Error(fmt::format("spawn: rank {} (pid {}) {}; the other ranks were stopped", rank, pid,
                            describeStatus(status)));
  }
}

}  // namespace ddprun::worker
