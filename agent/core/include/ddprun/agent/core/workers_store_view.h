// WorkersStoreView: what a feature may know of the store the node's
// workers use (the trained-alone note): how many connections their side of
// it accepted. The rounds implement it: the attempt's store served here,
// or the node relay in front of it, whose connections are then the
// workers' (the store sees only relays).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <cstdint>
#include <optional>

namespace ddprun::agent {

class WorkersStoreView {
 public:
  virtual ~WorkersStoreView() = default;
  // The workers' connections accepted in this attempt; nullopt when this
  // node serves no workers' store (another node's agent does, or worker
  // rank 0 hosts its own).
  virtual std::optional<std::uint64_t> workerConnections() const = 0;
};

}  // namespace ddprun::agent
