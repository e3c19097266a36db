#include "ddprun/agent/core/stop_request.h"

namespace ddprun::agent {

namespace {

// One overload per standing request (std::visit needs them all): whether
// `next` replaces it.
bool replacedBy(const RoundEnded&, const StopRequest& next) {
  return !std::holds_alternative<RoundEnded>(next);
}
bool replacedBy(const JobFailed&, const StopRequest& next) {
  return std::holds_alternative<SignalStop>(next);
}
bool replacedBy(const StoreLost&, const StopRequest&) { return false; }
bool replacedBy(const SignalStop&, const StopRequest&) { return false; }

}  // namespace

bool overrides(const StopRequest& next, const std::optional<StopRequest>& current) {
  if (!current) return true;
  return std::visit([&next](const auto& standing) { return replacedBy(standing, next); }, *current);
}

}  // namespace ddprun::agent
