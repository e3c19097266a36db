// ConsoleWriter: writes worker lines to ddprun's stdout/stderr from its own
// thread, so a console that stops reading (a stalled pipe, a frozen
// terminal) never blocks the agent's loop: signals, exits and restarts are
// handled whatever the console does.
//
// A line is written at once from the caller's thread when nothing is queued
// and the descriptor can take it without blocking (poll says writable and
// the line fits in PIPE_BUF); otherwise it is queued, in order (one queue for
// both descriptors), for the writer thread's blocking write(2) calls. The queue is bounded: past
// kMaxQueuedBytes further console lines are dropped and counted, and once the console catches up
// one warning line says how many were lost (log files written by --redirects/--tee are unaffected:
// they are written by the agent). At destruction the queue is flushed for at most kExitFlushLimit,
// then abandoned (a console that never reads cannot hold ddprun's exit).
//
// Thread-safety: write() and dropped() from any one thread; the writer
// thread is internal.
// Ownership: owns its thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ddprun::agent {

class ConsoleWriter {
 public:
  static constexpr std::size_t kMaxQueuedBytes = std::size_t{16} << 20;
  static constexpr std::chrono::milliseconds kExitFlushLimit{2000};

  explicit ConsoleWriter(std::function<void()> onRoom = {});
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Writes or queues `data` for `fd` (never blocks). One producer thread.
  void write(int fd, std::string_view data);
  // Waits until everything queued is written, for at most `limit` (so the
  // agent's own messages follow the workers' lines they concern).
  void flush(std::chrono::milliseconds limit);
  // More than kMaxQueuedBytes wait: stop producing until onRoom.
  bool full() const;
  // Bytes written so far (progress of a slow console).
  std::uint64_t written() const;

 private:
  struct Chunk {
    int fd;
    std::string data;
  };
  // Shared with the writer thread, which outlives this object when it is
  // abandoned (blocked on a console nobody reads): it then never touches
  // anything else, and never calls onRoom.
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable idle;
    std::deque<Chunk> queue;
    std::size_t queuedBytes = 0;
    std::uint64_t written = 0;
    bool wasFull = false;
    std::function<void()> onRoom;
    bool writing = false;
    bool stopping = false;
  };
  static void run(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace ddprun::agent
