// SignalSource: the stop signals ddprun handles, each with the pid that
// sent it, as events on the agent's loop.
//
// Asio's signal_set says which signal arrived, not who sent it; under
// Slurm that decides what a signal means (docs/multinode.md): one sent by
// a slurmstepd went to every process of the job step, the workers
// included, so ddprun must not forward it again. The handler is installed
// with SA_SIGINFO and writes the signal and si_pid to a pipe the loop
// reads (a write of 8 bytes to a pipe is atomic, and async-signal-safe).
//
// One SignalSource per process at a time. The destructor restores the
// signals' default dispositions.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <functional>
#include <vector>

namespace ddprun::agent {

class SignalSource {
 public:
  struct Received {
    int signal = 0;
    pid_t sender = 0;  // 0: the kernel (a terminal's Ctrl-C, a timer)
  };

  explicit SignalSource(boost::asio::io_context& io);
  ~SignalSource();
  SignalSource(const SignalSource&) = delete;
  SignalSource& operator=(const SignalSource&) = delete;

  // Handles `signal` from now on (instead of its default action).
  void add(int signal);
  bool handles(int signal) const;
  // `then` is called on the loop with the next signal (once per call).
  void asyncWait(std::function<void(Received)> then);
  // No more callbacks; a pending one is dropped.
  void cancel();

  // The command name (/proc/PID/comm) of `pid`, or "" when it is gone.
  static std::string commandOf(pid_t pid);

 private:
  boost::asio::posix::stream_descriptor reader_;
  int writer_ = -1;
  std::vector<int> signals_;
  Received pending_;
};

}  // namespace ddprun::agent
