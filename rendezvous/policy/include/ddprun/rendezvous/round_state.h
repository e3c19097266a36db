// The round state both rendezvous backends share, as plain values: the
// settings the first JOIN fixes, a node as it joins, a host's failure
// streak and exclusion, a lost node, a worker failure. The store server
// keeps them in memory (RendezvousManager); the etcd backend keeps them in
// its keys (etcd_round.h maps its JSON to and from these). The rules on
// them are round_policy.h; their words round_text.h.
//
// Times are milliseconds on whatever clock the backend passes in (the
// store: its steady clock; etcd: Unix time, shared by every node).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>

#include "ddprun/rendezvous/messages.h"

namespace ddprun::rendezvous::policy {

// Fixed by the JOIN that creates the rendezvous; every later JOIN must ask
// for the same nodes and budget.
struct Settings {
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;
  std::int64_t maxRestarts = 0;       // the job-wide restart budget
  std::uint32_t maxNodeFailures = 0;  // 0: never exclude a host
  std::uint32_t nodeCooldownMs = 0;
  // The nodes that can ever take part (a Slurm job step's); 0: any node may
  // join later.
  std::uint32_t fixedNodes = 0;

  bool elastic() const { return minNodes < maxNodes; }
  bool operator==(const Settings&) const = default;
};

// `request`'s settings, normalised (MIN at least 1, MAX at least MIN, a
// budget of at least 0).
Settings settingsOf(const protocol::JoinRequest& request);

// One node as it joins a round.
struct Member {
  std::string id;
  std::int64_t requestedRank = -1;  // --node_rank / SLURM_NODEID; -1: none
  std::uint32_t localWorldSize = 1;
  std::string address;  // its host: where its workers are reached
  std::uint32_t masterPort = 0;
  std::int64_t firstSeen = 0;  // arrival order: lower came first
  bool operator==(const Member&) const = default;
};

// A host (a node's address) of an elastic job with host exclusion. A host
// with streak 0 and no exclusion has nothing to remember.
struct HostRecord {
  std::int64_t streak = 0;           // rounds in a row its workers failed first
  std::int64_t excludedUntilMs = 0;  // 0: not excluded
  std::string node;                  // the node whose failure counted last
  bool operator==(const HostRecord&) const = default;
};

// A node lost without leaving (its connection closed, its heartbeats or
// lease lapsed).
struct LostNode {
  std::string address;
  std::int64_t nodeRank = -1;  // the node rank it asked for; -1: none
  std::string reason;
  bool operator==(const LostNode&) const = default;
};

// A worker failure a node reported for a round.
struct Failure {
  std::string node;
  std::string address;
  std::int64_t failedAtMs = 0;  // the failing node's clock
  bool lostAPeer = false;       // its workers failed because a peer went away
  bool operator==(const Failure&) const = default;
};

}  // namespace ddprun::rendezvous::policy
