// LogPump: reads one worker's output (a pipe, or the agent's side of the
// worker's terminal) and hands every chunk to the OutputRouter as it comes;
// the router assembles lines. `onEnd` runs once when the output reaches its
// end (every process that held the write side has exited: end of file on a
// pipe, EIO on a terminal) or is closed.
//
// Thread-safety: the agent's loop thread only.
// Ownership: shared_ptr; the read loop keeps it alive until the end or close().
#pragma once

#include <sys/ioctl.h>

#include <boost/asio/readable_pipe.hpp>

#include <functional>
#include <memory>

#include "ddprun/agent/output/output_router.h"

namespace ddprun::agent {

class LogPump : public std::enable_shared_from_this<LogPump> {
 public:
  LogPump(boost::asio::readable_pipe pipe, OutputRouter& router, int localRank, Stream stream,
          std::function<void()> onEnd);
  LogPump(const LogPump&) = delete;
  LogPump& operator=(const LogPump&) = delete;

  void start();
  // Gives up on the output (a straggler still holds it): shows the partial
  // line and closes it. onEnd runs if it has not yet.
  void close();
  bool ended() const { return ended_; }
  // The worker's terminal (when it has one) gets the router's current size
  // for this stream; false: no terminal to resize.
  bool resizeTerminal();

 private:
  void readMore();
  void end();

  boost::asio::readable_pipe pipe_;
  OutputRouter& router_;
  int localRank_;
  Stream stream_;
  char chunk_[16384];
  std::function<void()> onEnd_;
  bool ended_ = false;
};

}  // namespace ddprun::agent
