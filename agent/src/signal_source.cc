#include "signal_source.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/read.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "ddprun/common/logging.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::agent {
namespace {

// The write end of the current SignalSource's pipe, for the handler.
std::atomic<int> gWriter{-1};

struct Message {
  std::int32_t signal;
  std::int32_t sender;
};
static_assert(sizeof(Message) == 8 && sizeof(SignalSource::Received) == sizeof(Message));

void onSignal(int signal, siginfo_t* info, void*) {
  const int savedErrno = errno;
  const Message message{signal, info != nullptr ? static_cast<std::int32_t>(info->si_pid) : 0};
  const int fd = gWriter.load(std::memory_order_relaxed);
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(fd, &message, sizeof message);
  }
  errno = savedErrno;
}

}  // namespace

SignalSource::SignalSource(boost::asio::io_context& io) : reader_(io) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error("cannot make the signal pipe");
  }
  reader_.assign(fds[0]);
  writer_ = fds[1];
  int expected = -1;
  if (!gWriter.compare_exchange_strong(expected, writer_)) {
    throw std::logic_error("one SignalSource per process");
  }
}

SignalSource::~SignalSource() {
  for (int signal : signals_) ::signal(signal, SIG_DFL);
  gWriter.store(-1);
  ::close(writer_);
}

void SignalSource::add(int signal) {
  if (handles(signal)) return;
  struct sigaction action {};
  action.sa_sigaction = onSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
  signals_.push_back(signal);
}

bool SignalSource::handles(int signal) const {
  return std::find(signals_.begin(), signals_.end(), signal) != signals_.end();
}

void SignalSource::asyncWait(std::function<void(Received)> then) {
  boost::asio::async_read(
      reader_, boost::asio::buffer(&pending_, sizeof pending_),
      [this, then = std::move(then)](boost::system::error_code ec, std::size_t) {
        if (ec) return;
        then(pending_);
      });
}

void SignalSource::cancel() { reader_.cancel(); }

std::string SignalSource::commandOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

SignalDecision decideSignal(const SignalSource::Received& received,
                            const std::vector<int>& forwardedSignals, bool underSlurm,
                            const std::string& senderCommand) {
  const int sig = received.signal;
  const bool forwarded =
      std::find(forwardedSignals.begin(), forwardedSignals.end(), sig) != forwardedSignals.end();
  const bool fromSlurm = underSlurm && received.sender > 0 && senderCommand == "slurmstepd";
  if (!fromSlurm) {
    if (forwarded) return {SignalAction::kStop, ""};
    // Handled only for Slurm's sake: anyone else's has its default meaning.
    return {SignalAction::kDefault,
            fmt::format("ddprun received {} (not in --signals_to_handle) from pid {}; it ends "
                        "ddprun.",
                        signalName(sig), received.sender)};
  }
  if (sig == SIGTERM || sig == SIGINT) return {SignalAction::kStopWithoutForwarding, ""};
  return {SignalAction::kLeaveWorkersTraining,
          fmt::format("Slurm sent {} to the job step: every worker received it; ddprun neither "
                      "forwards it nor stops them (the early warning of --signal={}@TIME: "
                      "checkpoint, requeue, train on).",
                      signalName(sig), signalName(sig).substr(3))};
}

void SignalSource::addStopSignals(const std::vector<int>& forwarded, bool underSlurm) {
  for (int sig : forwarded) add(sig);
  if (underSlurm) {
    for (int sig : {SIGUSR1, SIGUSR2}) add(sig);
  }
}

void whenSignalled(boost::asio::signal_set& set, std::function<void()> then) {
  set.async_wait([&set, then = std::move(then)](boost::system::error_code ec, int) {
    if (ec) return;
    then();
    whenSignalled(set, then);
  });
}

void actOnSignal(const SignalSource::Received& received, const std::vector<int>& forwardedSignals,
                 bool underSlurm, const std::function<void(int signal, bool forward)>& stop) {
  const SignalDecision decision =
      decideSignal(received, forwardedSignals, underSlurm,
                   underSlurm ? SignalSource::commandOf(received.sender) : "");
  if (!decision.warning.empty()) DDPRUN_WARN("{}", decision.warning);
  switch (decision.action) {
    case SignalAction::kStop:
      return stop(received.signal, true);
    case SignalAction::kStopWithoutForwarding:
      return stop(received.signal, false);
    case SignalAction::kLeaveWorkersTraining:
      return;
    case SignalAction::kDefault:
      ::signal(received.signal, SIG_DFL);
      ::raise(received.signal);
      return;
  }
}

}  // namespace ddprun::agent
