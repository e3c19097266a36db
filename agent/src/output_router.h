// OutputRouter: where each line a worker prints goes.
//
// For every (local rank, stream) it holds the destinations chosen by
// --redirects, --tee and --local_ranks_filter: the console (ddprun's own
// stdout or stderr, with the configured prefix) and/or a log file, and for
// tee'd streams the --duplicate_std*_filters file shared by all ranks.
// Each line reaches the console in one piece through the ConsoleWriter, so
// lines of different workers never interleave mid-line and a console that
// stops reading never blocks the agent. Log files are created new
// (O_EXCL|O_NOFOLLOW: an existing file or a planted symlink is an error,
// never truncated or followed); a failed write (disk full, file size limit)
// is reported once as a warning naming the file, and the console copy goes
// on. The last lines of each worker's stderr are kept for the failure
// report.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <deque>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "console_writer.h"

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

  // Resumptions (whenConsoleHasRoom) run as handlers on `io`.
  explicit OutputRouter(boost::asio::io_context& io);
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

  // One complete line (without its newline).
  void line(int localRank, Stream stream, std::string_view text);

  const std::deque<std::string>& stderrTail(int localRank) const;
  // Lets queued console lines out first (bounded; see ConsoleWriter).
  void flushConsole() { console_.flush(ConsoleWriter::kExitFlushLimit); }
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
  };
  struct DuplicateFilter {
    std::vector<std::string> needles;
    FileSink file;
  };
  static void openFile(FileSink& sink, const std::filesystem::path& path);
  void writeFile(FileSink& sink, std::string_view data);
  void closeFiles();

  std::vector<Sink> sinks_;  // index: localRank * 2 + stream
  DuplicateFilter duplicates_[2];
  std::vector<std::deque<std::string>> tails_;
  std::string buffer_;
  boost::asio::io_context& io_;
  std::vector<std::function<void()>> waiting_;  // pumps paused for room
  ConsoleWriter console_;
};

}  // namespace ddprun::agent
