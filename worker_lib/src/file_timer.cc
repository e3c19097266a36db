#include "ddprun/worker/file_timer.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ddprun/common/error.h"

namespace ddprun::worker {

std::optional<FileTimer> FileTimer::fromEnvironment(int signal) {
  const char* path = std::getenv("TORCHELASTIC_TIMER_FILE");
  if (path == nullptr || *path == '\0') return std::nullopt;
  return FileTimer(path, signal);
}

FileTimer::FileTimer(std::filesystem::path pipe, int signal)
    : pipe_(std::move(pipe)), signal_(signal) {}

void FileTimer::acquire(const std::string& scope, std::chrono::duration<double> after) const {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  send(scope, now + after.count(), signal_);
}

void FileTimer::release(const std::string& scope) const { send(scope, -1, 0); }

void FileTimer::send(const std::string& scope, double expiration, int signal) const {
  const std::string line = nlohmann::json{{"version", 1},
                                          {"pid", static_cast<int>(::getpid())},
                                          {"scope_id", scope},
                                          {"expiration_time", expiration},
                                          {"signal", signal}}
                               .dump() +
                           "\n";
  if (line.size() > PIPE_BUF) {
    throw ConfigError(fmt::format(
        "file timer: the request for scope '{}...' is {} bytes, over PIPE_BUF ({}); use a "
        "shorter scope name",
        scope.substr(0, 40), line.size(), PIPE_BUF));
  }
  // As PyTorch's client: a non-blocking open fails at once when no agent
  // has the pipe open, instead of waiting for one.
  const int fd = ::open(pipe_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw Error(fmt::format(
        "file timer: cannot reach the agent's timer pipe {} ({}); is the agent running with "
        "TORCHELASTIC_ENABLE_FILE_TIMER=1?",
        pipe_.string(), std::strerror(errno)));
  }
  const ssize_t written = ::write(fd, line.data(), line.size());  // atomic: <= PIPE_BUF
  const int error = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size())) {
    throw Error(fmt::format("file timer: writing to {} failed ({})", pipe_.string(),
                            written < 0 ? std::strerror(error) : "a short write"));
  }
}

TimerGuard::TimerGuard(FileTimer timer, std::string scope)
    : timer_(std::move(timer)), scope_(std::move(scope)) {}

TimerGuard::TimerGuard(TimerGuard&& other) noexcept
    : timer_(std::move(other.timer_)), scope_(std::move(other.scope_)) {
  other.timer_.reset();
}

TimerGuard::~TimerGuard() {
  if (!timer_) return;
  try {
    timer_->release(scope_);
  } catch (const std::exception&) {
    // The agent is gone: nothing left to disarm.
  }
}

TimerGuard expires(std::chrono::duration<double> after, std::string scope, int signal) {
  auto timer = FileTimer::fromEnvironment(signal);
  if (!timer) {
    throw ConfigError(
        "expires(): this worker has no TORCHELASTIC_TIMER_FILE; launch it with "
        "TORCHELASTIC_ENABLE_FILE_TIMER=1 (ddprun or torchrun) to use file timers");
  }
  timer->acquire(scope, after);
  return TimerGuard(std::move(*timer), std::move(scope));
}

}  // namespace ddprun::worker
