// StopRequest: why a node stops, the one value NodeLifecycle keeps for it
// (docs/architecture.md, "The node's lifecycle").
//
// A round's end and the job's failure stop one attempt: the group's outcome
// still decides (success first, then a worker's failure), and the next
// round's assignment forgets them. A lost store and a signal stop the node:
// it exits with their code once nothing runs, whatever the outcome.
//
// When a second request comes, `overrides` says which one stands; in which
// states an input applies at all is NodeLifecycle's. Reading a request goes
// through std::visit or `requestIf`, never an unchecked dereference.
//
// Thread-safety: plain values.
#pragma once

#include <optional>
#include <string>
#include <variant>

namespace ddprun::agent {

// The round ended elsewhere (membership change, another node's failure):
// join again, no restart spent.
struct RoundEnded {
  std::string reason;  // the event's message: the restart note's reason
};
// The job's restart budget is spent: exit with the job's code and report.
struct JobFailed {
  int exitCode = 1;
  std::string report;
};
// The job's store (or etcd) is gone: exit 1.
struct StoreLost {
  std::string reason;  // "lost the rendezvous store at h:p (...)"
};
// The first stop signal: exit 128 + signal. Whether it was forwarded is no
// part of it: only that signal's own handling needs it.
struct SignalStop {
  int signal = 0;
};

using StopRequest = std::variant<RoundEnded, JobFailed, StoreLost, SignalStop>;

// Whether `next` replaces `current` (no request: anything does):
//   current     replaced by
//   RoundEnded  JobFailed, StoreLost, SignalStop (the job's or the node's end
//               wins over joining again)
//   JobFailed   SignalStop (a store closed by its host after the job failed
//               keeps the job's report)
//   StoreLost   nothing (a signal still stops the group; the exit stays 1)
//   SignalStop  nothing (a later signal only escalates)
bool overrides(const StopRequest& next, const std::optional<StopRequest>& current);

// The standing request if it is a `T`, else nullptr.
template <typename T>
const T* requestIf(const std::optional<StopRequest>& request) {
  return request ? std::get_if<T>(&*request) : nullptr;
}

}  // namespace ddprun::agent
