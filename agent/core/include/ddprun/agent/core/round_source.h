// RoundSource: where a node's rounds come from, as the node's lifecycle
// (node_lifecycle.h) sees it. One node alone (local_rounds.h: a private
// store, the restart budget counted here) and a node of a multi-node job
// (rendezvous_rounds.h: the job's store or etcd, the budget the job's) are
// the same to it: join a round, report a failure and learn whether the job
// restarts, leave, and (the store's host) wait until every node left.
//
// Every call answers through its callback, on the caller's loop and never
// inside the call; none blocks that loop. At most one call is in flight.
//
// Thread-safety: the lifecycle's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ddprun/agent/core/outcome.h"
#include "ddprun/rendezvous/messages.h"

namespace ddprun::agent {

struct JoinResult {
  std::optional<rendezvous::protocol::Assignment> assignment;
  bool closed = false;    // the job already failed: exitCode and report say how
  bool excluded = false;  // this host is left out for a cooldown: error says why
  int exitCode = 1;
  std::string report;
  std::string error;  // why the join failed (timeout, network)
  // The store (or etcd) gave this answer over a working connection: a loss
  // of the store noticed meanwhile on another connection came after it,
  // and the answer says more (the missing nodes, the job's failure).
  bool answered = false;
};

// Where a round's workers find their native store (DDPRUN_STORE_*): the
// address, and the prefix their keys live under.
struct WorkersStore {
  std::string host;
  int port = 0;
  std::string prefix;
};

// A failure of this node's workers, as the job is told it.
struct FailureNotice {
  std::int64_t round = 0;
  int exitCode = 0;                                // the code the job fails with if it stops now
  std::chrono::system_clock::time_point failedAt;  // the root cause's
  std::string report;                              // the root-cause report
  // A crash loop (--max_no_progress_restarts): the job stops now,
  // whatever restarts are left.
  bool giveUp = false;
  // The root cause lost a peer (lostAPeer): a knock-on, never blamed.
  bool lostAPeer = false;
};

// What a failure report got back: the decision, or why there is none.
struct FailureAnswer {
  std::optional<rendezvous::protocol::RestartDecision> decision;
  std::string error;  // the store could not be reached
};

class RoundSource {
 public:
  virtual ~RoundSource() = default;

  virtual void join(std::function<void(JoinResult)> done) = 0;
  // This node's workers failed.
  virtual void reportFailure(const FailureNotice& failure,
                             std::function<void(FailureAnswer)> done) = 0;
  // This node leaves the job, exiting with `exitCode`: 0 when its workers
  // are done; any other code while the others may still train names it to
  // them as a node that left (a signal, a lost store, its own failure).
  virtual void leave(std::int64_t round, int exitCode, std::function<void()> done) = 0;
  // True when this node's process serves the job's store: it waits for the
  // others (waitUntilAllLeft) before it exits with success or exclusion.
  virtual bool hosting() const = 0;
  virtual void waitUntilAllLeft(std::function<void()> done) = 0;
  // The store of the workers of `round` (an assignment join gave).
  virtual WorkersStore workersStore(const rendezvous::protocol::Assignment& round) const = 0;
  // "Restarting the worker group (restart 1 of 3)." and the like.
  virtual std::string restartMessage(std::int64_t restarts, int maxRestarts) const = 0;
};

}  // namespace ddprun::agent
