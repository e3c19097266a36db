#include "progress_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "ddprun/common/env.h"
#include "ddprun/common/node_telemetry.h"

namespace ddprun::worker {

namespace {

class Reporter {
 public:
  void send(telemetry::ProgressEvent event, std::int64_t step) {
    const char* pipe = std::getenv(env::kProgressPipe);
    if (pipe == nullptr || *pipe == '\0') return;
    if (fd_ < 0) fd_ = ::open(pipe, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) return;
    const std::string line = telemetry::progressLine(::getpid(), event, step);
    [[maybe_unused]] const ssize_t written = ::write(fd_, line.data(), line.size());
  }

  void step() {
    const auto now = std::chrono::steady_clock::now();
    ++steps_;
    if (steps_ > 1 && now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    send(telemetry::ProgressEvent::kStep, steps_);
  }

  std::mutex mutex;

 private:
  int fd_ = -1;
  std::int64_t steps_ = 0;
  std::chrono::steady_clock::time_point last_;
};

Reporter& reporter() {
  static Reporter instance;
  return instance;
}

}  // namespace

void reportProcessGroupFormed() {
  std::lock_guard lock(reporter().mutex);
  reporter().send(telemetry::ProgressEvent::kProcessGroup, 0);
}

void reportStep() {
  std::lock_guard lock(reporter().mutex);
  reporter().step();
}

}  // namespace ddprun::worker
