#include "ddprun/agent/features/uninterruptible/uninterruptible_watch.h"

#include <algorithm>

#include "ddprun/agent/features/parts/sampling_period.h"
#include "ddprun/common/proc_info.h"

namespace ddprun::agent {

using Clock = std::chrono::steady_clock;

UninterruptibleWatch::UninterruptibleWatch(boost::asio::io_context& io,
                                           std::chrono::milliseconds timeout, WorkersFn workers,
                                           EnteredFn onEntered, StuckFn onStuck)
    : timeout_(timeout),
      period_(samplingPeriod(timeout)),
      workers_(std::move(workers)),
      onEntered_(std::move(onEntered)),
      onStuck_(std::move(onStuck)),
      timer_(io) {
  arm();
}

UninterruptibleWatch::~UninterruptibleWatch() { *alive_ = false; }

void UninterruptibleWatch::arm() {
  timer_.expires_after(period_);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive || fired_) return;
    sample();
    if (*alive && !fired_) arm();  // onStuck may have destroyed it
  });
}

void UninterruptibleWatch::sample() {
  const auto now = Clock::now();
  std::map<pid_t, Clock::time_point> next;
  for (const WatchedWorker& worker : workers_()) {
    const auto stat = readProcStat(worker.pid);
    if (!stat || stat->state != 'D') continue;
    const auto seen = inDSince_.find(worker.pid);
    const Clock::time_point since = seen == inDSince_.end() ? now : seen->second;
    next[worker.pid] = since;
    if (seen == inDSince_.end()) onEntered_(worker);
    const auto inD = std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
    if (inD >= timeout_) {
      fired_ = true;
      onStuck_(worker, inD);  // may destroy this watch
      return;
    }
  }
  inDSince_ = std::move(next);
}

}  // namespace ddprun::agent
