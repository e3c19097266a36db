// LogPump: reads one worker output pipe and hands complete lines to the
// OutputRouter. A final partial line is flushed at end of file, and a line
// longer than 64 KiB is passed on in pieces rather than buffered forever.
// `onEnd` runs once when the pipe reaches end of file (every process that
// held its write end has exited) or is closed.
//
// Thread-safety: the agent's loop thread only.
// Ownership: shared_ptr; the read loop keeps it alive until EOF or close().
#pragma once

#include <boost/asio/readable_pipe.hpp>

#include <functional>
#include <memory>
#include <string>

#include "output_router.h"

namespace ddprun::agent {

class LogPump : public std::enable_shared_from_this<LogPump> {
 public:
  LogPump(boost::asio::readable_pipe pipe, OutputRouter& router, int localRank, Stream stream,
          std::function<void()> onEnd);
  LogPump(const LogPump&) = delete;
  LogPump& operator=(const LogPump&) = delete;

  void start();
  // Gives up on the pipe (a straggler still holds it): flushes the partial
  // line and closes it. onEnd runs if it has not yet.
  void close();
  bool ended() const { return ended_; }

 private:
  void readMore();
  void consume(std::size_t n);
  void flushPartial();
  void end();

  boost::asio::readable_pipe pipe_;
  OutputRouter& router_;
  int localRank_;
  Stream stream_;
  std::string pending_;
  char chunk_[16384];
  std::function<void()> onEnd_;
  bool ended_ = false;
};

}  // namespace ddprun::agent
