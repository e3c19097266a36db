#include "torch_version.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "ddprun/common/parse.h"

extern char** environ;

namespace ddprun::launcher {

namespace {

constexpr char kProbe[] =
    "import importlib.util as u, os, re\n"
    "s = u.find_spec('torch')\n"
    "f = os.path.join(s.submodule_search_locations[0], 'version.py') if s else ''\n"
    "m = re.search(r\"__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", open(f).read()) "
    "if f and os.path.isfile(f) else None\n"
    "print(m.group(1) if m else '')\n";

constexpr auto kDeadline = std::chrono::seconds(10);

}  // namespace

std::optional<TorchVersion> parseTorchVersion(const std::string& text) {
  const std::size_t dot = text.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::size_t end = text.find_first_not_of("0123456789", dot + 1);
  const auto major = parseInteger(text.substr(0, dot));
  const auto minor = parseInteger(text.substr(dot + 1, end - dot - 1));
  if (!major || !minor) return std::nullopt;
  return TorchVersion{static_cast<int>(*major), static_cast<int>(*minor), text};
}

std::optional<TorchVersion> probeTorchVersion(const std::string& interpreter) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string exe = interpreter, dashC = "-c", code = kProbe;
  char* argv[] = {exe.data(), dashC.data(), code.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return std::nullopt;
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    char buffer[256];
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n <= 0 || out.size() > 4096) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (const std::size_t nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  return parseTorchVersion(out);
}

}  // namespace ddprun::launcher
