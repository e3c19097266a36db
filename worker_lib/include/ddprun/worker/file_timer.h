// FileTimer: PyTorch's file timer (torch.distributed.elastic.timer's
// FileTimerClient and expires()) for C++ workers.
//
// Under ddprun or torchrun with TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent
// serves a named pipe and passes it as TORCHELASTIC_TIMER_FILE. A worker
// arms a timer around a step that must not hang; if the step has not
// released it by the deadline, the agent kills the worker with the timer's
// signal (SIGKILL by default) and the job takes its failure path (restart,
// report naming the scope).
//
// Example:
//   for (auto& batch : batches) {
//     auto guard = ddprun::worker::expires(std::chrono::minutes(5), "train_step");
//     step(batch);                      // released when guard goes out of scope
//   }
//
// The requests are PyTorch's: one JSON line of at most PIPE_BUF bytes
// ({"version": 1, "pid", "scope_id", "expiration_time", "signal"}), written
// atomically with a non-blocking open, so a Python and a C++ worker can
// share one agent.
//
// Thread-safety: FileTimer's methods may be called from any thread (each
// request is one write). No LibTorch needed (part of ddprun::worker_env).
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace ddprun::worker {

class FileTimer {
 public:
  // The agent's pipe from TORCHELASTIC_TIMER_FILE, or nullopt when the
  // worker was not started with one.
  static std::optional<FileTimer> fromEnvironment(int signal = SIGKILL);

  explicit FileTimer(std::filesystem::path pipe, int signal = SIGKILL);

  // Arms (or re-arms) the timer `scope` of this process to expire `after`
  // from now. Throws ddprun::Error when no agent reads the pipe, and
  // ConfigError for a request longer than PIPE_BUF (a very long scope).
  void acquire(const std::string& scope, std::chrono::duration<double> after) const;
  // Disarms it (nothing happens if it was not armed).
  void release(const std::string& scope) const;

  const std::filesystem::path& pipe() const { return pipe_; }

 private:
  void send(const std::string& scope, double expiration, int signal) const;

  std::filesystem::path pipe_;
  int signal_;
};

// Disarms its timer when destroyed. Movable, not copyable.
class TimerGuard {
 public:
  TimerGuard(FileTimer timer, std::string scope);
  ~TimerGuard();
  TimerGuard(TimerGuard&& other) noexcept;
  TimerGuard& operator=(TimerGuard&&) = delete;
  TimerGuard(const TimerGuard&) = delete;
  TimerGuard& operator=(const TimerGuard&) = delete;

 private:
  std::optional<FileTimer> timer_;
  std::string scope_;
};

// PyTorch's expires(after=..., scope=...): arms `scope` on the agent's
// timer and returns the guard that disarms it. Throws ConfigError when the
// worker has no TORCHELASTIC_TIMER_FILE (launch with
// TORCHELASTIC_ENABLE_FILE_TIMER=1).
[[nodiscard]] TimerGuard expires(std::chrono::duration<double> after, std::string scope,
                                 int signal = SIGKILL);

}  // namespace ddprun::worker
