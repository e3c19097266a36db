// FlightRecorderSetup: each attempt's workers get PyTorch's flight recorder,
// unless the user set it up under either name (TORCH_NCCL_* or TORCH_FR_*):
// a ring of the last 2,000 collectives (PyTorch's default from 2.11), a
// dump when NCCL's watchdog times a collective out, into the attempt's
// folder as rank_<global rank> (docs/operations.md, "Flight recorder").
// The failure report reads what they dumped (flight_recorder.h).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <filesystem>
#include <functional>

#include "ddprun/agent/core/feature.h"

namespace ddprun::agent {

class FlightRecorderSetup : public Feature {
 public:
  // `dir`: where an attempt's dumps go (created here).
  explicit FlightRecorderSetup(std::function<std::filesystem::path(const Attempt&)> dir)
      : dir_(std::move(dir)) {}
  // Nothing is set when the folder cannot be made.
  void contributeAttemptEnvironment(const Attempt& attempt, Environment& env) override;

 private:
  std::function<std::filesystem::path(const Attempt&)> dir_;
};

}  // namespace ddprun::agent
