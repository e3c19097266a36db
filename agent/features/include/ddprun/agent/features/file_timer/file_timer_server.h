// FileTimerServer: the agent's side of PyTorch's file timer
// (torch.distributed.elastic.timer.FileTimerClient), served as torchrun
// serves it when TORCHELASTIC_ENABLE_FILE_TIMER=1.
//
// It creates the named pipe given as TORCHELASTIC_TIMER_FILE (or one in the
// run directory) and reads the clients' requests from it: one JSON line
// each, {"version": 1, "pid", "scope_id", "expiration_time" (Unix seconds;
// negative: release), "signal"}. When a timer's deadline passes it calls
// `onExpired`, which sends the timer's signal to its process (a signal of 0
// or less only reports, as in PyTorch); that process's other timers are
// then dropped. The pipe is open for reading and writing by the server
// itself, so clients can always open it and a reader never sees end of
// file.
//
// Anything written to the pipe is hostile: lines longer than PIPE_BUF, bad
// JSON and pids that are not this node's workers or their descendants are
// dropped (counted, one warning per kind); at most kMaxTimers live timers.
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the pipe (removed on destruction when it created it).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "ddprun/agent/features/parts/line_pipe.h"

namespace ddprun::agent {

struct ExpiredTimer {
  int pid = 0;
  std::string scope;
  int signal = 0;
  std::chrono::system_clock::time_point deadline;
  std::chrono::system_clock::time_point firedAt;
};

class FileTimerServer {
 public:
  static constexpr std::size_t kMaxTimers = 4096;

  // Which pids may hold timers: the workers and their descendants.
  using AcceptFn = std::function<bool(int pid)>;
  using ExpiredFn = std::function<void(const ExpiredTimer&)>;

  // Creates the pipe at `path` (an existing pipe there is reused) and
  // starts reading. Throws ddprun::Error when it cannot.
  FileTimerServer(boost::asio::io_context& io, std::filesystem::path path, AcceptFn accept,
                  ExpiredFn onExpired);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::filesystem::path& path() const { return pipe_.path(); }
  // Drops every timer (a new attempt's workers start with none).
  void clear();
  std::size_t liveTimers() const { return timers_.size(); }
  // Called with the pid of every accepted request (a keep-alive is a sign
  // of progress).
  void onRequest(std::function<void(int pid)> then) { onRequest_ = std::move(then); }

 private:
  struct Timer {
    std::chrono::system_clock::time_point deadline;
    int signal = 0;
  };

  void handle(const std::string& line);
  void rearm();
  void expire();
  void dropTimersOf(int pid);

  AcceptFn accept_;
  ExpiredFn onExpired_;
  std::function<void(int pid)> onRequest_;
  LinePipe pipe_;
  boost::asio::steady_timer alarm_;
  std::map<std::pair<int, std::string>, Timer> timers_;  // (pid, scope)
  std::map<std::string, int> dropped_;                   // reason -> count
};

}  // namespace ddprun::agent
