#include "ddprun/agent/workers/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/proc_info.h"

namespace ddprun::agent {

namespace {

constexpr int kMaxGroups = 65536;

// The cgroup's directory and files, for the guardian (copied by fork).
char cgroupDir[4096];
char cgroupGroup[4096];

// The guardian's whole life. Async-signal-safe calls only, fixed storage.
[[noreturn]] void guardianMain(int readFd) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP}) {
    ::signal(sig, SIG_IGN);
  }
  // Hold nothing of the agent's but the pipe: a guardian keeping the
  // agent's stdout open would delay EOF for whoever reads it.
  const int devNull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2; ++fd) ::dup2(devNull, fd);
  const bool closedBelow =
      readFd <= 3 || ::syscall(SYS_close_range, 3, static_cast<unsigned>(readFd) - 1, 0) == 0;
  const bool closedAbove =
      ::syscall(SYS_close_range, static_cast<unsigned>(readFd) + 1, ~0U, 0) == 0;
  if (!closedBelow || !closedAbove) {  // kernels before 5.9
    for (int fd = 3; fd < 4096; ++fd) {
      if (fd != readFd) ::close(fd);
    }
  }
  static pid_t groups[kMaxGroups];
  int count = 0;
  std::int32_t message = 0;
  for (;;) {
    const ssize_t n = ::read(readFd, &message, sizeof(message));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(message))) break;  // EOF: the agent is gone
    if (message == 0) ::_exit(0);                           // orderly stop
    if (message > 0 && count < kMaxGroups) {
      groups[count++] = message;
    } else if (message < 0) {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -message) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  // Everything the workers started, wherever it moved to.
  if (cgroupDir[0] != '\0') WorkerCgroup::killAndRemove(cgroupDir, cgroupGroup, 2000);
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  std::string whyNot;
  cgroup_ = WorkerCgroup::create(whyNot);
  if (cgroup_) {
    std::snprintf(cgroupDir, sizeof cgroupDir, "%s", cgroup_->path().c_str());
    std::snprintf(cgroupGroup, sizeof cgroupGroup, "%s", cgroup_->groupPath().c_str());
  } else {
    useSubreaper(whyNot);
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error("ddprun could not create the guardian pipe; the system is out of descriptors");
  }
  guardian_ = ::fork();
  if (guardian_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error("ddprun could not fork its guardian process; the system is out of processes");
  }
  if (guardian_ == 0) {
    ::close(fds[1]);
    guardianMain(fds[0]);
  }
  ::close(fds[0]);
  writeFd_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  send(0);
  ::close(writeFd_);
  int status = 0;
  while (::waitpid(guardian_, &status, 0) < 0 && errno == EINTR) {
  }
}

void OrphanGuard::send(int message) {
  const std::int32_t value = message;
  while (::write(writeFd_, &value, sizeof(value)) < 0 && errno == EINTR) {
  }
}

void OrphanGuard::useSubreaper(const std::string& whyNot) {
  // Orphaned descendants become the agent's children, not init's.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  notice_ = fmt::format(
      "no cgroup for the workers ({}): a process a worker detaches from its process group is "
      "killed when the worker group ends, but survives a SIGKILL of ddprun itself",
      whyNot);
}

std::string OrphanGuard::beginGroup() {
  if (!cgroup_) return "";
  if (cgroup_->beginGroup()) return cgroup_->groupPath();
  const std::string path = cgroup_->groupPath();
  cgroup_.reset();
  useSubreaper(fmt::format("cannot make the cgroup {}", path));
  DDPRUN_INFO("Notice: {}.", notice_);
  return "";
}

void OrphanGuard::confirmCgroup(pid_t worker) {
  if (!cgroup_ || cgroupConfirmed_) return;
  cgroupConfirmed_ = true;
  if (cgroup_->holds(worker)) return;
  const std::string path = cgroup_->groupPath();
  cgroup_.reset();  // the guardian's kill of a removed cgroup does nothing
  useSubreaper(fmt::format(
      "worker pid {} could not join {} (the parent cgroup's controllers or permissions forbid it)",
      worker, path));
  DDPRUN_INFO("Notice: {}.", notice_);
}

std::vector<pid_t> OrphanGuard::adoptedChildren(const std::set<pid_t>& keep) const {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream list(task.path() / "children");
    pid_t pid = 0;
    while (list >> pid) {
      if (pid != guardian_ && !keep.contains(pid) && !keptChildren_.contains(pid))
        children.push_back(pid);
    }
  }
  return children;
}

std::vector<LeftoverProcess> OrphanGuard::killLeftovers(const std::set<pid_t>& workerGroups) {
  std::vector<LeftoverProcess> killed;
  auto note = [&](pid_t pid) {
    const pid_t group = ::getpgid(pid);
    if (group > 0 && !workerGroups.contains(group)) {
      killed.push_back({pid, readProcLine(pid, "comm")});
    }
  };
  if (cgroup_) {
    const auto members = cgroup_->members();
    for (pid_t pid : members) note(pid);
    if (!members.empty()) cgroup_->killAll();
    return killed;
  }
  // Subreaper: adopted orphans are children. Killed here, reaped here if
  // already dead, else by reapAdopted() on SIGCHLD (never a blocking wait:
  // a process in uninterruptible sleep must not freeze the agent). Their
  // own children become ours as they die and go at the next group's end.
  for (pid_t pid : adoptedChildren({})) {
    note(pid);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, WNOHANG);
  }
  return killed;
}

void OrphanGuard::reapAdopted(const std::set<pid_t>& keep) {
  if (cgroup_) return;  // not a subreaper: init reaps them
  for (pid_t pid : adoptedChildren(keep)) ::waitpid(pid, nullptr, WNOHANG);
}

void OrphanGuard::watch(pid_t processGroup) { send(processGroup); }
void OrphanGuard::unwatch(pid_t processGroup) { send(-processGroup); }

}  // namespace ddprun::agent
