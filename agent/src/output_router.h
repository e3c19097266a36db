// OutputRouter: where each line a worker prints goes.
//
// For every (local rank, stream) it holds the destinations chosen by
// --redirects, --tee and --local_ranks_filter: the agent's own stdout or
// stderr (with the configured prefix) and/or a log file. Each line is
// written to the console with a single write(2) from the agent's one loop
// thread, so lines of different workers never interleave mid-line. The
// last lines of each worker's stderr are kept for the failure report.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <deque>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

enum class Stream { kStdout = 0, kStderr = 1 };

struct StreamRoute {
  bool console = true;
  std::filesystem::path file;  // empty: no file
};

class OutputRouter {
 public:
  static constexpr std::size_t kTailLines = 20;

  OutputRouter() = default;
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // Replaces all routes for a new attempt of `numWorkers` workers; opens
  // (truncating) the files. Throws ddprun::Error if a file cannot be opened.
  void reset(int numWorkers);
  void setRoute(int localRank, Stream stream, const StreamRoute& route, std::string prefix);

  // One complete line (without its newline).
  void line(int localRank, Stream stream, std::string_view text);

  const std::deque<std::string>& stderrTail(int localRank) const;

 private:
  struct Sink {
    bool console = false;
    int fileFd = -1;
    std::string prefix;
  };
  void closeFiles();

  std::vector<Sink> sinks_;  // index: localRank * 2 + stream
  std::vector<std::deque<std::string>> tails_;
  std::string buffer_;
};

}  // namespace ddprun::agent
