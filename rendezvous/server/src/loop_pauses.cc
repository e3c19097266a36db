#include "loop_pauses.h"

#include <fmt/format.h>

#include "ddprun/common/logging.h"

namespace ddprun::rendezvous {

namespace {
double seconds(LoopPauses::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

bool LoopPauses::turn(Clock::time_point now) {
  const auto gap = now - lastTurn_;
  lastTurn_ = now;
  if (gap <= kTick + kNoticeable) return false;
  resumedAt_ = now;
  lastPause_ = gap;
  DDPRUN_WARN(
      "The store server {} did not run for {:.1f} s (its process was stopped, or its machine "
      "frozen or starved): the nodes' heartbeats it could not read meanwhile are not held "
      "against them.",
      name_, seconds(gap));
  return true;
}

std::string LoopPauses::recentPauseNote(Clock::time_point now, Clock::duration within) const {
  if (lastPause_ == Clock::duration{} || now - resumedAt_ > within) return "";
  return fmt::format(
      " (the store's own process had just been paused for {:.1f} s: that node likely gave up "
      "on the store meanwhile)",
      seconds(lastPause_));
}

}  // namespace ddprun::rendezvous
