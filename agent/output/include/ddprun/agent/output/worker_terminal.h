// Pseudo-terminals for workers (--tty): a worker whose output ddprun shows
// on a terminal writes to a terminal of its own, so `isatty()` is true in it
// as under torchrun, where workers write to the terminal itself (colour,
// tqdm's and rich's dynamic layout). ddprun reads the other side.
//
// The worker's side passes bytes through unchanged (no output processing:
// '\n' stays '\n', nothing is echoed), and carries a window size: the
// terminal's, less the columns of the rank prefix ddprun puts before each
// line, so that a progress bar sized to the window fits on one row.
//
// Thread-safety: free functions, no state.
#pragma once

#include <sys/ioctl.h>

#include <optional>
#include <string>

namespace ddprun::agent {

struct WorkerTerminal {
  int reader = -1;  // ddprun's side (the pty master), close-on-exec
  int writer = -1;  // the worker's stdout or stderr (the pty slave), close-on-exec
};

// A new pseudo-terminal of `size`. nullopt (errno set) where none can be had
// (no /dev/pts in a container, the kernel's pty limit): the caller uses a pipe.
std::optional<WorkerTerminal> openWorkerTerminal(const winsize& size);

// The window size of the terminal at `fd`; nullopt when `fd` is no terminal.
std::optional<winsize> terminalSize(int fd);

// The size a worker's terminal gets when ddprun's terminal is `outer` and its
// lines are shown after `prefix` (at least 20 columns).
winsize workerWindow(const winsize& outer, const std::string& prefix);

// Sets the window size of a worker's terminal from ddprun's side; false
// when `reader` is not a terminal (a pipe) or is closed.
bool resizeWorkerTerminal(int reader, const winsize& size);

}  // namespace ddprun::agent
