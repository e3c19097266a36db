// LinePipe: a named pipe that the node's workers write one line at a time
// to, read on the agent's loop: PyTorch's file timer requests
// (file_timer_server.h) and the workers' progress (progress_pipe.h).
//
// It creates the pipe at its path (an existing pipe there is reused, any
// other file there is refused) and opens it for reading and writing itself,
// so a writer can always open it (O_WRONLY|O_NONBLOCK fails without a
// reader) and a read never sees end of file. Lines are at most PIPE_BUF
// bytes (what one write(2) keeps whole); a longer one is dropped and
// `onOversized` called. Everything read is hostile: the caller parses it.
// It waits for the pipe to be readable and then reads what is there
// without blocking; drain() does the same at once, so a caller can take a
// worker's last lines before it handles that worker's exit.
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the pipe (removed on destruction when it created it).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <filesystem>
#include <functional>
#include <string>

namespace ddprun::agent {

class LinePipe {
 public:
  // `what` names the pipe in messages ("the file timer's pipe"); `variable`
  // is the environment variable that names it to the workers. Throws
  // ddprun::Error when the pipe cannot be made or opened.
  LinePipe(boost::asio::io_context& io, std::filesystem::path path, std::string what,
           std::string variable, std::function<void(const std::string&)> onLine,
           std::function<void()> onOversized);
  ~LinePipe();
  LinePipe(const LinePipe&) = delete;
  LinePipe& operator=(const LinePipe&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Reads and hands on every whole line the pipe holds now.
  void drain();

 private:
  void waitReadable();

  std::filesystem::path path_;
  std::string what_;
  bool created_ = false;
  std::function<void(const std::string&)> onLine_;
  std::function<void()> onOversized_;
  boost::asio::posix::stream_descriptor pipe_;
  std::string pending_;      // the start of a line not ended yet
  bool discarding_ = false;  // in a line longer than PIPE_BUF: drop to its end
};

}  // namespace ddprun::agent
