#include "ddprun/agent/features/line_pipe.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>

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
      pipe_(io),
      input_(PIPE_BUF + 1) {
  pipe_.assign(openPipe(path_, what_, variable, created_));
  readLine();
}

LinePipe::~LinePipe() {
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (created_) ::unlink(path_.c_str());
}

void LinePipe::readLine() {
  asio::async_read_until(pipe_, input_, '\n', [this](boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::operation_aborted) return;
    if (ec == asio::error::not_found) {
      // Longer than PIPE_BUF: drop what was buffered and carry on.
      input_.consume(input_.size());
      onOversized_();
    } else if (ec) {
      DDPRUN_WARN("{} {} failed ({}); it is no longer read.", what_, path_.string(), ec.message());
      return;
    } else {
      std::string line(asio::buffers_begin(input_.data()),
                       asio::buffers_begin(input_.data()) + static_cast<std::ptrdiff_t>(n));
      input_.consume(n);
      onLine_(line);
    }
    readLine();
  });
}

}  // namespace ddprun::agent
