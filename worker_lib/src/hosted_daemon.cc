#include "hosted_daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "ddprun/common/env.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"

namespace ddprun::worker {

namespace {

namespace fs = std::filesystem;
constexpr char kBinary[] = "ddprun-rendezvous";

bool isExecutable(const fs::path& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0 && fs::is_regular_file(path);
}

std::vector<fs::path> candidates() {
  std::vector<fs::path> paths;
  if (const char* explicitPath = std::getenv("DDPRUN_RENDEZVOUS_BIN"))
    paths.push_back(explicitPath);
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) paths.push_back(self.parent_path() / kBinary);
#ifdef DDPRUN_BUILD_BINDIR
  paths.push_back(fs::path(DDPRUN_BUILD_BINDIR) / kBinary);
#endif
#ifdef DDPRUN_INSTALL_BINDIR
  paths.push_back(fs::path(DDPRUN_INSTALL_BINDIR) / kBinary);
#endif
  for (const auto& dir : executableSearchPath()) paths.push_back(fs::path(dir) / kBinary);
  return paths;
}

// Reads the daemon's first stdout line ("listening on HOST:PORT").
std::string readLine(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

}  // namespace

std::string findRendezvousDaemon() {
  std::vector<std::string> tried;
  for (const auto& path : candidates()) {
    if (isExecutable(path)) return path.string();
    tried.push_back(path.string());
  }
  throw ConfigError(
      fmt::format("cannot find {} to host the job's store (looked in: {}); install ddprun or set "
                  "DDPRUN_RENDEZVOUS_BIN to its path",
                  kBinary, fmt::join(tried, ", ")));
}

HostedDaemon::HostedDaemon(const std::string& host, std::uint16_t port, const std::string& token) {
  const std::string binary = findRendezvousDaemon();
  std::vector<std::string> args = {binary, "--host", host, "--port", std::to_string(port)};
  auto variables = environmentMap();
  variables[env::kToken] = token;
  // Only warnings and errors: the daemon shares the terminal with the job.
  variables.emplace(env::kLogLevel, "warn");
  std::vector<std::string> environment;
  for (const auto& [name, value] : variables) environment.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) throw NetworkError("cannot create a pipe for the daemon");
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw NetworkError("cannot fork to start ddprun-rendezvous");
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(pipeFds[1], STDOUT_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(pipeFds[1]);
  const std::string line = readLine(pipeFds[0]);
  ::close(pipeFds[0]);
  const auto colon = line.rfind(':');
  if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    throw NetworkError(fmt::format(
        "{} could not listen on {}:{} (exit status {}); is the port already in use? Its "
        "message is above",
        binary, host, port, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
  }
  port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

HostedDaemon::~HostedDaemon() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

}  // namespace ddprun::worker
