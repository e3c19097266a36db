#include "output_router.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"

namespace ddprun::agent {

namespace {

void writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a closed console must not take the agent down
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

OutputRouter::~OutputRouter() { closeFiles(); }

void OutputRouter::closeFiles() {
  for (Sink& sink : sinks_) {
    if (sink.fileFd >= 0) ::close(sink.fileFd);
    sink.fileFd = -1;
  }
}

void OutputRouter::reset(int numWorkers) {
  closeFiles();
  sinks_.assign(static_cast<std::size_t>(numWorkers) * 2, Sink{});
  tails_.assign(static_cast<std::size_t>(numWorkers), {});
}

void OutputRouter::setRoute(int localRank, Stream stream, const StreamRoute& route,
                            std::string prefix) {
  Sink& sink = sinks_.at(static_cast<std::size_t>(localRank) * 2 + static_cast<int>(stream));
  sink.console = route.console;
  sink.prefix = std::move(prefix);
  if (!route.file.empty()) {
    sink.fileFd = ::open(route.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (sink.fileFd < 0) {
      throw Error(fmt::format("cannot open the log file {}: {}", route.file.string(),
                              std::strerror(errno)));
    }
  }
}

void OutputRouter::line(int localRank, Stream stream, std::string_view text) {
  const Sink& sink = sinks_.at(static_cast<std::size_t>(localRank) * 2 + static_cast<int>(stream));
  if (stream == Stream::kStderr) {
    auto& tail = tails_.at(static_cast<std::size_t>(localRank));
    tail.emplace_back(text);
    if (tail.size() > kTailLines) tail.pop_front();
  }
  if (sink.fileFd >= 0) {
    buffer_.assign(text);
    buffer_ += '\n';
    writeAll(sink.fileFd, buffer_);
  }
  if (sink.console) {
    buffer_.assign(sink.prefix);
    buffer_ += text;
    buffer_ += '\n';
    writeAll(stream == Stream::kStdout ? STDOUT_FILENO : STDERR_FILENO, buffer_);
  }
}

const std::deque<std::string>& OutputRouter::stderrTail(int localRank) const {
  return tails_.at(static_cast<std::size_t>(localRank));
}

}  // namespace ddprun::agent
