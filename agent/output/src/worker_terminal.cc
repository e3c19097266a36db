#include "ddprun/agent/output/worker_terminal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ddprun::agent {

std::optional<WorkerTerminal> openWorkerTerminal(const winsize& size) {
  // posix_openpt rather than openpty: the same on every glibc (openpty moved
  // into libc in 2.34, and the portable build must run on older ones).
  const int reader = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (reader < 0) return std::nullopt;
  int writer = -1;
  char name[64];
  if (::grantpt(reader) == 0 && ::unlockpt(reader) == 0 &&
      ::ptsname_r(reader, name, sizeof name) == 0) {
    writer = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  }
  termios mode{};
  if (writer >= 0 && ::tcgetattr(writer, &mode) == 0) {
    // Raw output, no echo: what the worker writes is what ddprun reads.
    mode.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    mode.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
    if (::tcsetattr(writer, TCSANOW, &mode) == 0 && ::ioctl(reader, TIOCSWINSZ, &size) == 0) {
      return WorkerTerminal{reader, writer};
    }
  }
  const int error = errno;
  if (writer >= 0) ::close(writer);
  ::close(reader);
  errno = error;
  return std::nullopt;
}

std::optional<winsize> terminalSize(int fd) {
  if (!::isatty(fd)) return std::nullopt;
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) {
    // A terminal that reports no size (a serial line, some CI runners).
    size.ws_col = 80;
    size.ws_row = 24;
  }
  return size;
}

winsize workerWindow(const winsize& outer, const std::string& prefix) {
  winsize size = outer;
  const int columns = static_cast<int>(outer.ws_col) - static_cast<int>(prefix.size());
  size.ws_col = static_cast<unsigned short>(std::max(columns, 20));
  size.ws_xpixel = 0;
  size.ws_ypixel = 0;
  return size;
}

bool resizeWorkerTerminal(int reader, const winsize& size) {
  return reader >= 0 && ::isatty(reader) && ::ioctl(reader, TIOCSWINSZ, &size) == 0;
}

}  // namespace ddprun::agent
