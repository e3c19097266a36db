#include "orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "ddprun/common/error.h"

namespace ddprun::agent {

namespace {

constexpr int kMaxGroups = 65536;

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
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
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

void OrphanGuard::watch(pid_t processGroup) { send(processGroup); }
void OrphanGuard::unwatch(pid_t processGroup) { send(-processGroup); }

}  // namespace ddprun::agent
