// OutputRouter: where the bytes a worker writes go.
//
// For every (local rank, stream) it holds the destinations chosen by
// --redirects, --tee and --local_ranks_filter: the console (ddprun's own
// stdout or stderr, with the configured prefix) and/or a log file, and for
// tee'd streams the --duplicate_std*_filters file shared by all ranks.
// Log files get every byte as it comes, unchanged. The console gets lines:
// each line reaches it in one piece through the ConsoleWriter, so lines of
// different workers never interleave mid-line and a console that stops
// reading never blocks the agent. When the console is a terminal (and
// --tty is not off) an unfinished line is drawn at once and redrawn in place
// (LiveConsole), so progress bars move; a line longer than 64 KiB is passed
// on in pieces rather than buffered forever. Log files are created new
// (O_EXCL|O_NOFOLLOW: an existing file or a planted symlink is an error,
// never truncated or followed); a failed write (disk full, file size limit)
// is reported once as a warning naming the file, and the console copy goes
// on. The last lines of each worker's stderr are kept for the failure
// report, as a terminal shows them (the text after a line's last '\r').
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include <deque>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/ioctl.h>

#include <optional>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/output/console_writer.h"
#include "ddprun/agent/output/live_console.h"

namespace ddprun::agent {

enum class Stream { kStdout = 0, kStderr = 1 };

struct StreamRoute {
  bool console = true;
  std::filesystem::path file;  // empty: no file
  bool filtered = false;       // also checked against the duplicate filters
};

class OutputRouter {
 public:
  static constexpr std::size_t kTailLines = 20;

  // Resumptions (whenConsoleHasRoom) run as handlers on `io`. `tty` says
  // whether a terminal console is drawn live and workers get terminals.
  OutputRouter(boost::asio::io_context& io, WorkerTty tty);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // Replaces all routes for a new attempt of `numWorkers` workers.
  void reset(int numWorkers);
  // Opens (creates) the route's file. Throws ddprun::Error naming the file.
  void setRoute(int localRank, Stream stream, const StreamRoute& route, std::string prefix);
  // Lines of filtered routes that contain any of `filters` are copied to
  // `file` (created new; throws ddprun::Error). No filters: nothing.
  void setDuplicateFilter(Stream stream, const std::vector<std::string>& filters,
                          const std::filesystem::path& file);

  // Bytes the worker wrote to `stream` (any amount, lines in pieces).
  void write(int localRank, Stream stream, std::string_view bytes);
  // The stream reached end of file: its unfinished line is shown as a line.
  void end(int localRank, Stream stream);

  // The window size the worker's `stream` gets as a terminal of its own;
  // nullopt: a pipe (the stream's console is no terminal, or --tty=off).
  std::optional<winsize> workerTerminal(int localRank, Stream stream) const;
  // ddprun's stdout or stderr is a terminal, drawn live.
  bool consoleIsTerminal() const { return terminal_[0] || terminal_[1]; }
  // Reads the console's window size again (after SIGWINCH).
  void refreshTerminalSize();
  // Ends a progress line left open on the terminal, so that ddprun's own
  // message that follows starts on a row of its own.
  void endOpenLine() { live_.endOpenLine(); }

  const std::deque<std::string>& stderrTail(int localRank) const;
  // Lets queued console lines out first (bounded; see ConsoleWriter).
  void flushConsole() {
    live_.endOpenLine();
    console_.flush(ConsoleWriter::kExitFlushLimit);
  }
  // Backpressure: a LogPump stops reading while the console is full and
  // calls whenConsoleHasRoom() to be resumed.
  bool consoleFull() const { return console_.full(); }
  void whenConsoleHasRoom(std::function<void()> resume);
  std::uint64_t consoleWritten() const { return console_.written(); }

 private:
  struct FileSink {
    int fd = -1;
    std::filesystem::path path;
  };
  struct Sink {
    bool console = false;
    bool filtered = false;
    FileSink file;
    std::string prefix;
    std::string pending;  // the unfinished line
  };
  struct DuplicateFilter {
    std::vector<std::string> needles;
    FileSink file;
  };
  static void openFile(FileSink& sink, const std::filesystem::path& path);
  void writeFile(FileSink& sink, std::string_view data);
  void closeFiles();
  // One whole line (or a 64 KiB piece of one) to the tail, filter, console.
  void line(int index, Stream stream, std::string_view text);
  int consoleFd(Stream stream) const {
    return stream == Stream::kStdout ? STDOUT_FILENO : STDERR_FILENO;
  }

  std::vector<Sink> sinks_;  // index: localRank * 2 + stream
  DuplicateFilter duplicates_[2];
  std::vector<std::deque<std::string>> tails_;
  std::string buffer_;
  boost::asio::io_context& io_;
  std::vector<std::function<void()>> waiting_;  // pumps paused for room
  ConsoleWriter console_;
  WorkerTty tty_;
  // Per console descriptor (stdout, stderr): its window size when it is a
  // terminal drawn live; nullopt: a pipe or file, written line by line.
  std::optional<winsize> terminal_[2];
  LiveConsole live_;
};

}  // namespace ddprun::agent
