#include "ddprun/agent/output/output_router.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/agent/output/worker_terminal.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"

namespace ddprun::agent {

namespace {
// A line longer than this is passed on in pieces.
constexpr std::size_t kMaxLine = 64 * 1024;
}  // namespace

OutputRouter::OutputRouter(boost::asio::io_context& io, WorkerTty tty)
    : io_(io),
      console_([this] {
        // On the writer thread: resume the paused pumps on the loop.
        boost::asio::post(io_, [this] {
          auto resume = std::move(waiting_);
          waiting_.clear();
          for (auto& fn : resume) fn();
        });
      }),
      tty_(tty),
      live_([this](int fd, std::string_view bytes) { console_.write(fd, bytes); }) {
  refreshTerminalSize();
}

void OutputRouter::refreshTerminalSize() {
  for (Stream stream : {Stream::kStdout, Stream::kStderr}) {
    terminal_[static_cast<int>(stream)] =
        tty_ == WorkerTty::kNever ? std::nullopt : terminalSize(consoleFd(stream));
  }
}

std::optional<winsize> OutputRouter::workerTerminal(int localRank, Stream stream) const {
  if (tty_ == WorkerTty::kNever) return std::nullopt;
  const Sink& sink = sinks_.at(static_cast<std::size_t>(localRank) * 2 + static_cast<int>(stream));
  const auto& console = terminal_[static_cast<int>(stream)];
  if (sink.console && console) return workerWindow(*console, sink.prefix);
  if (tty_ == WorkerTty::kAlways) {
    return console ? *console : winsize{24, 80, 0, 0};
  }
  return std::nullopt;
}

OutputRouter::~OutputRouter() { closeFiles(); }

void OutputRouter::whenConsoleHasRoom(std::function<void()> resume) {
  if (!console_.full()) {
    boost::asio::post(io_, std::move(resume));  // drained meanwhile
    return;
  }
  waiting_.push_back(std::move(resume));
}

void OutputRouter::closeFiles() {
  auto close = [](FileSink& sink) {
    if (sink.fd >= 0) ::close(sink.fd);
    sink.fd = -1;
  };
  for (Sink& sink : sinks_) close(sink.file);
  for (DuplicateFilter& filter : duplicates_) {
    close(filter.file);
    filter.needles.clear();
  }
}

void OutputRouter::reset(int numWorkers) {
  live_.endOpenLine();
  closeFiles();
  sinks_.assign(static_cast<std::size_t>(numWorkers) * 2, Sink{});
  tails_.assign(static_cast<std::size_t>(numWorkers), {});
}

void OutputRouter::openFile(FileSink& sink, const std::filesystem::path& path) {
  // Never follow a symlink, never truncate: the file must be new.
  sink.fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0644);
  if (sink.fd < 0) {
    throw Error(fmt::format("cannot create the log file {}: {}{}", path.string(),
                            std::strerror(errno),
                            errno == EEXIST ? " (ddprun never overwrites or follows an existing "
                                              "file; remove it)"
                                            : ""));
  }
  sink.path = path;
}

void OutputRouter::writeFile(FileSink& sink, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(sink.fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Said once; later lines of this file are lost, the console goes on.
      DDPRUN_WARN(
          "Cannot write the log file {}: {}; its later lines are lost (the console copy "
          "goes on).",
          sink.path.string(), n < 0 ? std::strerror(errno) : "nothing written");
      ::close(sink.fd);
      sink.fd = -1;
      return;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void OutputRouter::setRoute(int localRank, Stream stream, const StreamRoute& route,
                            std::string prefix) {
  Sink& sink = sinks_.at(static_cast<std::size_t>(localRank) * 2 + static_cast<int>(stream));
  sink.console = route.console;
  sink.filtered = route.filtered;
  sink.prefix = std::move(prefix);
  if (!route.file.empty()) openFile(sink.file, route.file);
}

void OutputRouter::setDuplicateFilter(Stream stream, const std::vector<std::string>& filters,
                                      const std::filesystem::path& file) {
  DuplicateFilter& filter = duplicates_[static_cast<int>(stream)];
  filter.needles = filters;
  if (!filters.empty()) openFile(filter.file, file);
}

void OutputRouter::write(int localRank, Stream stream, std::string_view bytes) {
  const int index = localRank * 2 + static_cast<int>(stream);
  Sink& sink = sinks_.at(static_cast<std::size_t>(index));
  if (sink.file.fd >= 0) writeFile(sink.file, bytes);  // every byte, as it comes
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      sink.pending.append(bytes);
      break;
    }
    if (sink.pending.empty()) {
      line(index, stream, bytes.substr(0, newline));
    } else {
      sink.pending.append(bytes.substr(0, newline));
      line(index, stream, sink.pending);
      sink.pending.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  if (sink.pending.size() >= kMaxLine) {
    // A bar redrawn for a whole epoch: only what it shows now matters.
    const std::string_view visible = LiveConsole::shown(sink.pending);
    if (visible.size() < sink.pending.size())
      sink.pending.erase(0, sink.pending.size() - visible.size());
  }
  if (sink.pending.size() >= kMaxLine) {
    line(index, stream, sink.pending);
    sink.pending.clear();
  }
  if (!sink.pending.empty() && sink.console && terminal_[static_cast<int>(stream)]) {
    live_.partial(index, consoleFd(stream), sink.prefix, sink.pending);
  }
}

void OutputRouter::end(int localRank, Stream stream) {
  const int index = localRank * 2 + static_cast<int>(stream);
  Sink& sink = sinks_.at(static_cast<std::size_t>(index));
  if (!sink.pending.empty()) {
    line(index, stream, sink.pending);
    sink.pending.clear();
  }
  live_.close(index);
}

void OutputRouter::line(int index, Stream stream, std::string_view text) {
  Sink& sink = sinks_.at(static_cast<std::size_t>(index));
  if (stream == Stream::kStderr) {
    auto& tail = tails_.at(static_cast<std::size_t>(index / 2));
    tail.emplace_back(LiveConsole::shown(text));
    if (tail.size() > kTailLines) tail.pop_front();
  }
  DuplicateFilter& filter = duplicates_[static_cast<int>(stream)];
  if (sink.filtered && filter.file.fd >= 0) {
    for (const std::string& needle : filter.needles) {
      if (text.find(needle) == std::string_view::npos) continue;
      buffer_.assign(sink.prefix);
      buffer_ += text;
      buffer_ += '\n';
      writeFile(filter.file, buffer_);
      break;
    }
  }
  if (!sink.console) return;
  if (terminal_[static_cast<int>(stream)]) {
    live_.line(index, consoleFd(stream), sink.prefix, text);
    return;
  }
  buffer_.assign(sink.prefix);
  buffer_ += text;
  buffer_ += '\n';
  console_.write(consoleFd(stream), buffer_);
}

const std::deque<std::string>& OutputRouter::stderrTail(int localRank) const {
  return tails_.at(static_cast<std::size_t>(localRank));
}

}  // namespace ddprun::agent
