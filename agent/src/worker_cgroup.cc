#include "worker_cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace ddprun::agent {

namespace {

// The cgroup2 mount point, from /proc/self/mountinfo ("... - cgroup2 ...").
std::string cgroup2Mount() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string type;
    after >> type;
    if (type != "cgroup2") continue;
    std::istringstream fields(line);
    std::string id, parent, device, root, mountPoint;
    fields >> id >> parent >> device >> root >> mountPoint;
    return mountPoint;
  }
  return "";
}

// This process's cgroup v2 path ("0::/a/b" in /proc/self/cgroup).
std::string ownCgroup() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// Async-signal-safe: the workers and the guardian call it after fork.
bool writeText(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  ::close(fd);
  return ok;
}

}  // namespace

std::unique_ptr<WorkerCgroup> WorkerCgroup::create(std::string& whyNot) {
  const std::string mount = cgroup2Mount();
  if (mount.empty()) {
    whyNot = "no cgroup2 file system is mounted";
    return nullptr;
  }
  const std::string own = ownCgroup();
  if (own.empty()) {
    whyNot = "this process is in no cgroup v2";
    return nullptr;
  }
  // pid plus random bits: pids repeat across pid namespaces sharing a
  // parent cgroup, and an existing cgroup is never taken over.
  std::random_device random;
  const std::string relative =
      fmt::format("{}/ddprun-{}-{:08x}", own == "/" ? "" : own, ::getpid(), random());
  const std::string path = mount + relative;
  if (::mkdir(path.c_str(), 0755) != 0) {
    whyNot = fmt::format("cannot create {}: {}", path, std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<WorkerCgroup> cgroup(new WorkerCgroup(path, relative));
  struct stat info {};
  if (::stat(cgroup->kill_.c_str(), &info) != 0) {
    whyNot = "the kernel has no cgroup.kill (Linux 5.14 or newer has)";
    return nullptr;
  }
  return cgroup;
}

WorkerCgroup::WorkerCgroup(std::string path, std::string relative)
    : path_(std::move(path)),
      relative_(std::move(relative)),
      procs_(path_ + "/cgroup.procs"),
      kill_(path_ + "/cgroup.kill"),
      events_(path_ + "/cgroup.events") {}

WorkerCgroup::~WorkerCgroup() {
  killAndRemove(path_.c_str(), kill_.c_str(), events_.c_str(), 1000);
}

void WorkerCgroup::killAndRemove(const char* dir, const char* killFile, const char* eventsFile,
                                 int timeoutMs) {
  writeText(killFile, "1");
  // The kernel delivers the kills; "populated 0" in cgroup.events says
  // the cgroup is empty, and every change of it wakes poll() with POLLPRI.
  const int events = ::open(eventsFile, O_RDONLY | O_CLOEXEC);
  if (events >= 0) {
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
      char text[256];
      const ssize_t n = ::pread(events, text, sizeof text - 1, 0);
      if (n <= 0) break;
      text[n] = '\0';
      bool populated = false;
      constexpr char kKey[] = "populated 1";
      for (ssize_t i = 0; i + static_cast<ssize_t>(sizeof kKey) - 1 <= n && !populated; ++i) {
        populated = std::memcmp(text + i, kKey, sizeof kKey - 1) == 0;
      }
      if (!populated) break;
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const long elapsedMs =
          (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1'000'000;
      if (elapsedMs >= timeoutMs) break;
      pollfd wait{events, POLLPRI, 0};
      ::poll(&wait, 1, static_cast<int>(timeoutMs - elapsedMs));
    }
    ::close(events);
  }
  ::rmdir(dir);
}

std::vector<int> WorkerCgroup::members() const {
  std::vector<int> pids;
  std::ifstream procs(procs_);
  int pid = 0;
  while (procs >> pid) pids.push_back(pid);
  return pids;
}

void WorkerCgroup::killAll() { writeText(kill_.c_str(), "1"); }

bool WorkerCgroup::holds(pid_t pid) const {
  std::ifstream groups("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3) == relative_;
  }
  return false;
}

bool WorkerCgroup::enter(const char* procsFile) { return writeText(procsFile, "0"); }

}  // namespace ddprun::agent
