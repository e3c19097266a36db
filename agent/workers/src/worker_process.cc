#include "ddprun/agent/workers/worker_process.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "ddprun/agent/output/worker_terminal.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "fd_wait.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace bp = boost::process::v2;

namespace {

// Closes every descriptor from 3 up except `keep` and `alsoKeep` (-1:
// none). No allocation: runs in the child before exec.
void closeInheritedDescriptors(int keep, int alsoKeep) {
  const int low = alsoKeep >= 0 && alsoKeep < keep ? alsoKeep : keep;
  const int high = alsoKeep > keep ? alsoKeep : keep;
  auto closeRange = [](int first, int last) {
    if (first <= last)
      ::syscall(SYS_close_range, static_cast<unsigned>(first), static_cast<unsigned>(last), 0);
  };
  closeRange(3, low - 1);
  if (high != low) closeRange(low + 1, high - 1);
  ::syscall(SYS_close_range, static_cast<unsigned>(high) + 1, ~0U, 0);
}

// Runs in the child between fork and exec: only async-signal-safe calls.
struct ChildSetup {
  pid_t agent;
  bool bindCpus = false;
  cpu_set_t cpus{};
  int memoryNode = -1;
  int passFd = -1;  // kept open across exec

  // 0, or the errno of the step that failed.
  int apply() const {
    // Its own session (and so its own process group), as torchrun's
    // start_new_session: a signal to the group reaches the worker and its
    // children, and the kernel's autogroup scheduler gives each worker its
    // own CPU share instead of one for ddprun and all its workers.
    if (::setsid() < 0) return errno;
    // Die with the agent; if the agent already died, die now.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent) ::_exit(128 + SIGKILL);
    // Signals the agent handles or ignores must be default in the worker
    // (dispositions first: the mask was blocked across the clone).
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (bindCpus && ::sched_setaffinity(0, sizeof(cpus), &cpus) != 0) return errno;
    if (memoryNode >= 0) {
      unsigned long mask[16] = {};  // up to 1024 nodes
      const auto bits = 8 * sizeof(unsigned long);
      mask[static_cast<unsigned>(memoryNode) / bits] |= 1UL << (memoryNode % bits);
      constexpr int kMpolPreferred = 1;  // <numaif.h> MPOL_PREFERRED
      ::syscall(SYS_set_mempolicy, kMpolPreferred, mask, sizeof(mask) * 8);
    }
    return 0;
  }
};

// The child's whole life before exec: async-signal-safe calls only (it is
// a raw clone of a process that has threads). Failures go to `report`.
[[noreturn]] void runChild(const ChildSetup& setup, int out, int err, int report, const char* path,
                           char* const* argv, char* const* envp) {
  int error = 0;
  if (::dup2(out, STDOUT_FILENO) < 0 || ::dup2(err, STDERR_FILENO) < 0) error = errno;
  if (error == 0) {
    closeInheritedDescriptors(report, setup.passFd);
    if (setup.passFd >= 0 && ::fcntl(setup.passFd, F_SETFD, 0) != 0) error = errno;
  }
  if (error == 0) error = setup.apply();
  if (error == 0) {
    ::execve(path, argv, envp);
    error = errno;
  }
  [[maybe_unused]] const ssize_t n = ::write(report, &error, sizeof error);
  ::_exit(127);
}

// A child of this process, born in the cgroup `cgroupDir` when it is given
// and the kernel allows (clone3 with CLONE_INTO_CGROUP: no migration, so
// no wait for an RCU grace period), else where the agent is.
pid_t cloneChild(const std::string& cgroupDir) {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  int dir = -1;
  if (!cgroupDir.empty()) dir = ::open(cgroupDir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    args.flags = CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(dir);
  }
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0 && dir >= 0 && errno != ENOSYS) {
    // Refused (permissions, the parent cgroup's controllers): outside it.
    // The agent sees that in the first worker and falls back.
    args.flags = 0;
    pid = ::syscall(SYS_clone3, &args, sizeof args);
  }
  const int error = errno;
  if (dir >= 0 && pid != 0) ::close(dir);
  if (pid < 0 && error == ENOSYS) return ::fork();  // kernels before 5.3
  errno = error;
  return static_cast<pid_t>(pid);
}

// How long a worker forked by the preload zygote may take to set itself up
// (a working directory on a dead NFS mount must not hang the agent).
constexpr std::chrono::seconds kForkedSetupLimit{30};

// The fix for running out of descriptors; empty for other errors.
std::string descriptorAdvice(int error) {
  if (error != EMFILE && error != ENFILE) return "";
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return fmt::format(
      " (ddprun may hold {} descriptors: `ulimit -n`); raise the limit or start fewer workers",
      limit.rlim_cur);
}

}  // namespace

WorkerProcess::WorkerProcess(asio::io_context& io, const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const CpuPlacement& placement,
                             const SpawnOptions& options) try
    : stdout_(io), stderr_(io), handle_(io) {
  asio::writable_pipe outWrite(io);
  asio::writable_pipe errWrite(io);
  int out = STDERR_FILENO;
  int err = STDERR_FILENO;
  // The worker's side of its terminals; closed here once it has them.
  std::vector<int> terminalWriters;
  struct CloseWriters {
    std::vector<int>& fds;
    ~CloseWriters() {
      for (int fd : fds) ::close(fd);
    }
  } closeWriters{terminalWriters};
  auto connect = [&](asio::readable_pipe& reader, asio::writable_pipe& writer,
                     const std::optional<winsize>& terminal) -> int {
    if (terminal) {
      if (auto pty = openWorkerTerminal(*terminal)) {
        reader.assign(pty->reader);
        terminalWriters.push_back(pty->writer);
        return pty->writer;
      }
      static bool said = false;
      if (!said) {
        said = true;
        DDPRUN_WARN(
            "Cannot give the workers terminals of their own ({}); they write to pipes "
            "(isatty() is false in them; --tty=never says this on purpose).",
            std::strerror(errno));
      }
    }
    boost::system::error_code pipeError;
    asio::connect_pipe(reader, writer, pipeError);
    if (pipeError) {
      throw Error(fmt::format("cannot create the output pipes for '{}': {}{}", argv.at(0),
                              pipeError.message(), descriptorAdvice(pipeError.value())));
    }
    return writer.native_handle();
  };
  if (!options.outputToAgentStderr) {
    out = connect(stdout_, outWrite, options.stdoutTerminal);
    err = connect(stderr_, errWrite, options.stderrTerminal);
  }
  std::optional<pid_t> forked;
  if (options.forker) forked = forkChild(argv, env, placement, *options.forker, out, err);
  pid_ = forked ? *forked : execChild(argv, env, placement, options, out, err);
  try {
    handle_ = bp::process_handle(io.get_executor(), pid_);
  } catch (const boost::system::system_error& e) {
    ::kill(-pid_, SIGKILL);  // started, but cannot be watched: it must not run on
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    throw Error(fmt::format("cannot watch '{}' (pid {}): {}{}", argv[0], pid_, e.what(),
                            descriptorAdvice(e.code().value())));
  }
} catch (const boost::system::system_error& e) {
  // Asio's own descriptors (an epoll instance, pipes) ran out before the fork.
  throw Error(fmt::format("cannot start '{}': {}{}", argv.at(0), e.what(),
                          descriptorAdvice(e.code().value())));
}

pid_t WorkerProcess::execChild(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env, const CpuPlacement& placement,
                               const SpawnOptions& options, int out, int err) {
  ChildSetup setup{::getpid()};
  if (!placement.cpus.empty()) {
    setup.bindCpus = true;
    CPU_ZERO(&setup.cpus);
    for (int cpu : placement.cpus) CPU_SET(static_cast<unsigned>(cpu), &setup.cpus);
  }
  setup.memoryNode = placement.memoryNode;
  setup.passFd = options.passFd;

  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const auto& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  // The child reports a failure before exec here; exec closes it.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    throw Error(fmt::format("cannot start '{}': {}{}", argv.at(0), std::strerror(errno),
                            descriptorAdvice(errno)));
  }
  // No signal handler of the agent may run in the child before it resets
  // them (an asio handler would write to the agent's signal pipe).
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = cloneChild(placement.cgroup);
  if (pid == 0) {
    runChild(setup, out, err, report[1], argv.at(0).c_str(), args.data(), envp.data());
  }
  const int cloneError = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    throw Error(fmt::format("cannot start '{}': {}{}", argv[0], std::strerror(cloneError),
                            descriptorAdvice(cloneError)));
  }
  int childError = 0;
  ssize_t n = 0;
  while ((n = ::read(report[0], &childError, sizeof childError)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof childError)) {
    ::waitpid(pid, nullptr, 0);
    throw Error(fmt::format("cannot start '{}': {}{}", argv[0], std::strerror(childError),
                            descriptorAdvice(childError)));
  }
  return pid;
}

std::optional<pid_t> WorkerProcess::forkChild(const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env,
                                              const CpuPlacement& placement, const Forker& forker,
                                              int out, int err) {
  // Both ways: the child writes why it could not start, or shuts down its
  // side once set up and waits for one byte before it runs the program.
  int report[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, report) != 0) {
    throw Error(fmt::format("cannot start '{}': {}{}", argv.at(0), std::strerror(errno),
                            descriptorAdvice(errno)));
  }
  const auto pid = forker(ForkRequest{argv, env, placement, out, err, report[1]});
  ::close(report[1]);
  if (!pid) {
    ::close(report[0]);  // a child that was forked all the same reads EOF and exits
    return std::nullopt;
  }
  std::string why;
  const auto deadline = std::chrono::steady_clock::now() + kForkedSetupLimit;
  bool finished = false;
  char buffer[512];
  while (!finished && waitFor(report[0], POLLIN, deadline)) {
    const ssize_t n = ::read(report[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    finished = n <= 0;
    if (n > 0 && why.size() < 4096) why.append(buffer, static_cast<std::size_t>(n));
  }
  if (!finished || !why.empty()) {
    ::close(report[0]);
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    throw Error(fmt::format(
        "cannot start '{}' from the preload zygote: {}", argv.at(0),
        finished
            ? why
            : fmt::format(
                  "it did not finish its set-up in {} s",
                  std::chrono::duration_cast<std::chrono::seconds>(kForkedSetupLimit).count())));
  }
  const char go = 'g';
  const bool told = ::write(report[0], &go, 1) == 1;
  ::close(report[0]);
  if (!told) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    throw Error(fmt::format("cannot start '{}' from the preload zygote: {}", argv.at(0),
                            std::strerror(errno)));
  }
  return pid;
}

void WorkerProcess::signalGroup(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

void WorkerProcess::waitForExit(std::function<void(ExitStatus)> onExit) {
  handle_.async_wait([onExit = std::move(onExit)](bp::error_code ec, int status) {
    onExit(ec ? ExitStatus{127, 0, false} : ExitStatus::fromWaitStatus(status));
  });
}

}  // namespace ddprun::agent
