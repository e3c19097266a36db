#include "ddprun/agent/workers/worker_cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
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

// Async-signal-safe: the guardian calls it after fork.
bool writeText(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  ::close(fd);
  return ok;
}

// Waits until the cgroup whose cgroup.events is `eventsFile` holds no
// process ("populated 0"), at most `timeoutMs`: every change of the file
// wakes poll() with POLLPRI. Async-signal-safe.
void waitUntilEmpty(const char* eventsFile, int timeoutMs) {
  const int events = ::open(eventsFile, O_RDONLY | O_CLOEXEC);
  if (events < 0) return;
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    char text[256];
    const ssize_t n = ::pread(events, text, sizeof text - 1, 0);
    if (n <= 0) break;
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
  if (::stat(cgroup->launch_.kill.c_str(), &info) != 0) {
    whyNot = "the kernel has no cgroup.kill (Linux 5.14 or newer has)";
    return nullptr;
  }
  return cgroup;
}

WorkerCgroup::Files::Files(std::string directory)
    : dir(std::move(directory)),
      procs(dir + "/cgroup.procs"),
      kill(dir + "/cgroup.kill"),
      events(dir + "/cgroup.events") {}

WorkerCgroup::WorkerCgroup(std::string path, std::string relative)
    : launch_(path), group_(path + "/group"), groupRelative_(relative + "/group") {}

WorkerCgroup::~WorkerCgroup() { killAndRemove(launch_.dir.c_str(), group_.dir.c_str(), 1000); }

bool WorkerCgroup::beginGroup() {
  struct stat info {};
  if (::stat(group_.dir.c_str(), &info) == 0) {
    // The previous group's: empty it, and a new cgroup replaces it.
    writeText(group_.kill.c_str(), "1");
    waitUntilEmpty(group_.events.c_str(), 1000);
    if (::rmdir(group_.dir.c_str()) != 0) return false;
  }
  return ::mkdir(group_.dir.c_str(), 0755) == 0;
}

void WorkerCgroup::killAndRemove(const char* dir, const char* child, int timeoutMs) {
  char file[4200];
  std::snprintf(file, sizeof file, "%s/cgroup.kill", dir);
  writeText(file, "1");
  std::snprintf(file, sizeof file, "%s/cgroup.events", dir);
  waitUntilEmpty(file, timeoutMs);
  if (child != nullptr) ::rmdir(child);
  ::rmdir(dir);
}

std::vector<int> WorkerCgroup::members() const {
  std::vector<int> pids;
  std::ifstream procs(group_.procs);
  int pid = 0;
  while (procs >> pid) pids.push_back(pid);
  return pids;
}

void WorkerCgroup::killAll() { writeText(group_.kill.c_str(), "1"); }

bool WorkerCgroup::holds(pid_t pid) const {
  std::ifstream groups("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3) == groupRelative_;
  }
  return false;
}

}  // namespace ddprun::agent
