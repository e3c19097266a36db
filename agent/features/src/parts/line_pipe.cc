#include "ddprun/agent/features/parts/line_pipe.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"

namespace ddprun::agent {

namespace asio = boost::asio;

namespace {

int openPipe(const std::filesystem::path& path, const std::string& what,
             const std::string& variable, bool& created) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (!S_ISFIFO(info.st_mode)) {
      throw Error(
          fmt::format("{}={} exists and is not a named pipe; remove it or name another path",
                      variable, path.string()));
    }
  } else if (::mkfifo(path.c_str(), 0600) == 0) {
    created = true;
  } else {
    throw Error(fmt::format("cannot create {} {}: {}", what, path.string(), std::strerror(errno)));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw Error(fmt::format("cannot open {} {}: {}", what, path.string(), std::strerror(errno)));
  }
  return fd;
}

}  // namespace

LinePipe::LinePipe(asio::io_context& io, std::filesystem::path path, std::string what,
                   std::string variable, std::function<void(const std::string&)> onLine,
                   std::function<void()> onOversized)
    : path_(std::move(path)),
      what_(std::move(what)),
      onLine_(std::move(onLine)),
      onOversized_(std::move(onOversized)),
      pipe_(io) {
  pipe_.assign(openPipe(path_, what_, variable, created_));
  waitReadable();
}

LinePipe::~LinePipe() {
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (created_) ::unlink(path_.c_str());
}

void LinePipe::waitReadable() {
  pipe_.async_wait(asio::posix::descriptor_base::wait_read, [this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      DDPRUN_WARN("{} {} failed ({}); it is no longer read.", what_, path_.string(), ec.message());
      return;
    }
    drain();
    waitReadable();
  });
}

void LinePipe::drain() {
  if (!pipe_.is_open()) return;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), buffer, sizeof(buffer));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;  // EAGAIN: nothing more now (the pipe is open for writing too: no EOF)
    }
    for (const char* at = buffer; at < buffer + n;) {
      const char* end = static_cast<const char*>(std::memchr(at, '\n', buffer + n - at));
      const std::size_t size = static_cast<std::size_t>((end ? end : buffer + n) - at);
      if (!discarding_) pending_.append(at, size);
      if (pending_.size() > PIPE_BUF) {  // longer than one write keeps whole
        pending_.clear();
        if (!discarding_) onOversized_();
        discarding_ = true;
      }
      if (end == nullptr) break;
      if (!discarding_) onLine_(pending_ + "\n");
      pending_.clear();
      discarding_ = false;
      at = end + 1;
    }
  }
}

}  // namespace ddprun::agent
