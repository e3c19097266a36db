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
#include <boost/asio/signal_set.hpp>

#include <functional>
#include <string>
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
  // The signals that stop the node: `forwarded`, and SIGUSR1/SIGUSR2 under
  // Slurm (its warning before a time limit or a preemption).
  void addStopSignals(const std::vector<int>& forwarded, bool underSlurm);
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

// What a received signal means for the node (docs/multinode.md, "Slurm"):
//   - a signal in --signals_to_handle from anyone but Slurm: stop the
//     workers, forwarding it (torchrun's meaning);
//   - SIGTERM or SIGINT from a slurmstepd (scancel, the time limit,
//     preemption): stop, without forwarding (every worker has it already);
//   - any other signal from a slurmstepd (--signal=SIG@TIME's early
//     warning, scancel --signal): leave the workers training;
//   - USR1/USR2 caught only for Slurm's sake, from anyone else: the signal's
//     default action.
// `warning` is the line to log, or empty.
enum class SignalAction { kStop, kStopWithoutForwarding, kLeaveWorkersTraining, kDefault };
struct SignalDecision {
  SignalAction action = SignalAction::kStop;
  std::string warning;
};
// `senderCommand`: the sender's command name (SignalSource::commandOf).
SignalDecision decideSignal(const SignalSource::Received& received,
                            const std::vector<int>& forwardedSignals, bool underSlurm,
                            const std::string& senderCommand);

// Calls `then` on the loop each time one of `set`'s signals arrives, until
// the set is cancelled.
void whenSignalled(boost::asio::signal_set& set, std::function<void()> then);

// Acts on `received` as decideSignal says: warns, then stops the node
// (`stop(signal, forward)`), leaves the workers training, or takes the
// signal's default action.
void actOnSignal(const SignalSource::Received& received, const std::vector<int>& forwardedSignals,
                 bool underSlurm, const std::function<void(int signal, bool forward)>& stop);

}  // namespace ddprun::agent
