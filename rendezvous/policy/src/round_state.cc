#include "ddprun/rendezvous/round_state.h"

#include <algorithm>

namespace ddprun::rendezvous::policy {

Settings settingsOf(const protocol::JoinRequest& request) {
  Settings s;
  s.minNodes = std::max<std::uint32_t>(1, request.minNodes);
  s.maxNodes = std::max(s.minNodes, request.maxNodes);
  s.lastCallMs = request.lastCallMs;
  s.maxRestarts = std::max<std::int64_t>(0, request.maxRestarts);
  s.maxNodeFailures = request.maxNodeFailures;
  s.nodeCooldownMs = request.nodeCooldownMs;
  s.fixedNodes = request.fixedNodes;
  return s;
}

}  // namespace ddprun::rendezvous::policy
