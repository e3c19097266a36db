#include "ddprun/agent/core/outcome.h"

#include <sys/wait.h>

#include <algorithm>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

#include "ddprun/common/signal_names.h"

namespace ddprun::agent {

ExitStatus ExitStatus::fromWaitStatus(int status) {
  ExitStatus result;
  if (WIFSIGNALED(status)) {
    result.signaled = true;
    result.signal = WTERMSIG(status);
  } else {
    result.code = WEXITSTATUS(status);
  }
  return result;
}

std::string describeExit(const WorkerFailure& f) {
  if (f.status.signaled) {
    return fmt::format("worker rank {} (local rank {}, pid {}) was killed by {}", f.rank,
                       f.localRank, f.pid, signalName(f.status.signal));
  }
  return fmt::format("worker rank {} (local rank {}, pid {}) exited with code {}", f.rank,
                     f.localRank, f.pid, f.status.code);
}

std::string failureText(const WorkerFailure& failure) {
  std::string text;
  if (failure.error) text = failure.error->message + "\n" + failure.error->traceback + "\n";
  for (const auto& line : failure.stderrTail) text += line + "\n";
  return text;
}

bool lostAPeer(const WorkerFailure& failure) {
  if (failure.status.signaled || failure.status.code == 0 || !failure.cause.empty()) return false;
  // What Gloo, NCCL and the TCPStore client say when the other end is gone.
  static constexpr std::string_view kPeerGone[] = {
      "Connection closed by peer",
      "Connection reset by peer",
      "Broken pipe",
      "remote process exited or there was a network error",
      "ncclRemoteError",
      "NCCL communicator was aborted",
  };
  const std::string text = failureText(failure);
  return std::any_of(std::begin(kPeerGone), std::end(kPeerGone),
                     [&](std::string_view s) { return text.find(s) != std::string::npos; });
}

void FailureHistory::add(int attempt, const WorkerFailure& f) {
  ++count_;
  last_ = fmt::format("attempt {}: {}", attempt, describeExit(f));
  if (firstLines_.size() < 3) firstLines_.push_back(last_);
  const std::string cause = f.status.signaled
                                ? fmt::format("rank {} {}", f.rank, signalName(f.status.signal))
                                : fmt::format("rank {} exit code {}", f.rank, f.status.code);
  for (auto& [known, times] : causes_) {
    if (known == cause) {
      ++times;
      return;
    }
  }
  if (causes_.size() < kMaxCauses) {
    causes_.emplace_back(cause, 1);
  } else {
    ++otherCauses_;
  }
}

std::vector<std::string> FailureHistory::lines() const {
  if (count_ <= 3) return firstLines_;
  std::vector<std::string> out{"first: " + firstLines_.front(), "last:  " + last_};
  std::string causes = "causes:";
  for (const auto& [cause, times] : causes_) causes += fmt::format(" {} x{};", cause, times);
  if (otherCauses_ > 0) causes += fmt::format(" other causes x{};", otherCauses_);
  causes.pop_back();
  out.push_back(causes);
  return out;
}

}  // namespace ddprun::agent
