// LoopPauses: notices that the store server's loop did not run for a while
// (its process stopped by SIGSTOP, a frozen VM, a starved machine): a jump
// of the steady clock between two turns of a ticking timer, or between the
// last turn and a keep-alive check that ran first on waking.
//
// A node's silence is judged only from the end of the last pause: while
// the server did not run it read no heartbeats, so the nodes are not blamed
// for them (they get a full keep-alive bound after it). A node lost right
// after a pause is named with the pause, which likely made it give up on
// the store.
//
// Thread-safety: the server's loop thread only.
#pragma once

#include <chrono>
#include <string>

namespace ddprun::rendezvous {

class LoopPauses {
 public:
  using Clock = std::chrono::steady_clock;
  // How often the server's tick turns, and how much later than that a turn
  // must be to count as a pause (a busy loop's lateness is not one).
  static constexpr std::chrono::milliseconds kTick{250};
  static constexpr std::chrono::milliseconds kNoticeable{1000};

  explicit LoopPauses(std::string serverName) : name_(std::move(serverName)) {}

  // A turn of the loop at `now`: true when it ends a pause (logged once).
  bool turn(Clock::time_point now);
  // Silence counts from here: the end of the last pause (the epoch if none).
  Clock::time_point resumedAt() const { return resumedAt_; }
  // " (...)" naming a pause that ended within `within` of `now`, else "".
  std::string recentPauseNote(Clock::time_point now, Clock::duration within) const;

 private:
  std::string name_;
  Clock::time_point lastTurn_ = Clock::now();
  Clock::time_point resumedAt_{};
  Clock::duration lastPause_{};
};

}  // namespace ddprun::rendezvous
