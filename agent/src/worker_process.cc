#include "worker_process.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <fmt/format.h>

#include "ddprun/common/error.h"
#include "worker_cgroup.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace bp = boost::process::v2;

ExitStatus ExitStatus::fromWaitStatus(int status) {
  ExitStatus result;
  if (WIFSIGNALED(status)) {
    result.signaled = true;
    result.signal = WTERMSIG(status);
  } else {
    result.code = WEXITSTATUS(status);
  }
  return result;
}

namespace {

// Closes every descriptor from 3 up except those in `keep` (Boost.Process
// 1.81's own close_all skips the gaps between kept descriptors, so fds below
// its exec-error pipe would leak into workers). No allocation: runs after fork.
void closeInheritedDescriptors(const std::vector<int>& keep) {
  unsigned next = 3;
  for (;;) {
    // The smallest kept descriptor at or above `next`.
    unsigned kept = ~0U;
    for (int fd : keep) {
      if (fd >= 0 && static_cast<unsigned>(fd) >= next && static_cast<unsigned>(fd) < kept) {
        kept = static_cast<unsigned>(fd);
      }
    }
    if (kept > next) ::syscall(SYS_close_range, next, kept == ~0U ? ~0U : kept - 1, 0);
    if (kept == ~0U) return;
    next = kept + 1;
  }
}

// Runs in the child between fork and exec: only async-signal-safe calls.
struct ChildSetup {
  pid_t agent;
  bool bindCpus = false;
  cpu_set_t cpus{};
  int memoryNode = -1;
  const char* cgroupProcs = nullptr;

  bp::error_code on_exec_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&,
                               const char* const*) {
    closeInheritedDescriptors(launcher.fd_whitelist);
    // Into the launch's cgroup, with everything it will start (checked by
    // the agent beforehand; a failure leaves it where it is).
    if (cgroupProcs != nullptr) WorkerCgroup::enter(cgroupProcs);
    // Its own process group, so a signal reaches the worker and its children.
    if (::setpgid(0, 0) != 0) return {errno, bp::system_category()};
    // Die with the agent; if the agent already died, die now.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent) ::_exit(128 + SIGKILL);
    // Signals the agent handles or ignores must be default in the worker.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    if (bindCpus && ::sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
      return {errno, bp::system_category()};
    }
    if (memoryNode >= 0) {
      unsigned long mask[16] = {};  // up to 1024 nodes
      const auto bits = 8 * sizeof(unsigned long);
      mask[static_cast<unsigned>(memoryNode) / bits] |= 1UL << (memoryNode % bits);
      constexpr int kMpolPreferred = 1;  // <numaif.h> MPOL_PREFERRED
      ::syscall(SYS_set_mempolicy, kMpolPreferred, mask, sizeof(mask) * 8);
    }
    return {};
  }
};

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
                             const std::vector<std::string>& env, const CpuPlacement& placement) try
    : stdout_(io), stderr_(io), handle_(io) {
  asio::writable_pipe outWrite(io);
  asio::writable_pipe errWrite(io);
  boost::system::error_code pipeError;
  asio::connect_pipe(stdout_, outWrite, pipeError);
  if (!pipeError) asio::connect_pipe(stderr_, errWrite, pipeError);
  if (pipeError) {
    throw Error(fmt::format("cannot create the output pipes for '{}': {}{}", argv.at(0),
                            pipeError.message(), descriptorAdvice(pipeError.value())));
  }
  ChildSetup setup{::getpid()};
  if (!placement.cpus.empty()) {
    setup.bindCpus = true;
    CPU_ZERO(&setup.cpus);
    for (int cpu : placement.cpus) CPU_SET(static_cast<unsigned>(cpu), &setup.cpus);
  }
  setup.memoryNode = placement.memoryNode;
  if (!placement.cgroupProcs.empty()) setup.cgroupProcs = placement.cgroupProcs.c_str();

  std::vector<const char*> envp;
  envp.reserve(env.size() + 1);
  for (const auto& entry : env) envp.push_back(entry.c_str());
  envp.push_back(nullptr);

  bp::posix::default_launcher launcher;
  launcher.env = envp.data();
  bp::error_code ec;
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  // The launcher tells its io_context about the fork, and the child then
  // rebuilds that context's reactor before exec. Launching on an empty
  // context keeps that work (and the agent's descriptors) out of the child;
  // the exit is then watched on the agent's own context.
  asio::io_context spawnContext;
  auto process = launcher(spawnContext.get_executor(), ec, bp::filesystem::path(argv.at(0)), args,
                          bp::process_stdio{{}, outWrite, errWrite}, setup);
  if (ec) {
    throw Error(fmt::format("cannot start '{}': {}{}", argv[0], ec.message(),
                            descriptorAdvice(ec.value())));
  }
  pid_ = process.id();
  process.detach();
  try {
    handle_ = bp::process_handle(io.get_executor(), pid_);
  } catch (const boost::system::system_error& e) {
    ::kill(-pid_, SIGKILL);  // started, but cannot be watched: it must not run on
    ::waitpid(pid_, nullptr, 0);
    throw Error(fmt::format("cannot watch '{}' (pid {}): {}{}", argv[0], pid_, e.what(),
                            descriptorAdvice(e.code().value())));
  }
} catch (const boost::system::system_error& e) {
  // Asio's own descriptors (an epoll instance, pipes) ran out before the fork.
  throw Error(fmt::format("cannot start '{}': {}{}", argv.at(0), e.what(),
                          descriptorAdvice(e.code().value())));
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
