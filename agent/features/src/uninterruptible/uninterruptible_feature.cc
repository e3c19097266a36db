#include "ddprun/agent/features/uninterruptible/uninterruptible_feature.h"

#include <signal.h>

#include <fmt/format.h>

#include "ddprun/agent/features/hang_watchdog/hang_watchdog.h"
#include "ddprun/common/logging.h"

namespace ddprun::agent {

UninterruptibleFeature::UninterruptibleFeature(boost::asio::io_context& io,
                                               std::chrono::milliseconds timeout,
                                               RunningWorkers& workers, LifecycleInputs& lifecycle)
    : io_(io), timeout_(timeout), workers_(workers), lifecycle_(lifecycle) {}

void UninterruptibleFeature::attemptStarted(const Attempt&) {
  watch_ = std::make_unique<UninterruptibleWatch>(
      io_, timeout_, [this] { return workers_.watched(); },
      [this](const WatchedWorker& worker) { onEntered(worker); },
      [this](const WatchedWorker& worker, std::chrono::milliseconds inD) { onStuck(worker, inD); });
}

void UninterruptibleFeature::onEntered(const WatchedWorker& worker) {
  DDPRUN_WARN(
      "Worker rank {} (pid {}) entered uninterruptible sleep (D state); the node is unhealthy if "
      "it stays there {:g} s (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT).",
      workers_.rankOf(worker.localRank), worker.pid, timeout_.count() / 1000.0);
}

void UninterruptibleFeature::onStuck(const WatchedWorker& worker, std::chrono::milliseconds inD) {
  const int rank = workers_.rankOf(worker.localRank);
  const std::string where = describeWait(worker.pid);
  const std::string cause = fmt::format(
      "stuck in uninterruptible sleep (D state) for {:.1f} s "
      "(TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT={:g}){}; the node is unhealthy, so ddprun "
      "sent it SIGKILL and does not restart the workers",
      inD.count() / 1000.0, timeout_.count() / 1000.0, where.empty() ? "" : "; " + where);
  DDPRUN_WARN("Worker rank {} (pid {}) is {}.", rank, worker.pid, cause);
  lifecycle_.markUnhealthy();
  workers_.noteCause(worker.localRank, cause);
  workers_.signal(worker.pid, SIGKILL);
}

}  // namespace ddprun::agent
