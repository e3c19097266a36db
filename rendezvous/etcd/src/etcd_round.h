// The rendezvous state ddprun keeps in etcd (docs/multinode.md, "etcd"),
// and the decisions every node computes from it. Under <prefix>/<rdzv_id>/:
//   state          the round: phase, members by group rank, restarts, the
//                  job's failure; changed only by compare-and-swap
//   alive/<node>   on the node's lease: gone when the node stops renewing
//   joining/<node> on the node's lease: the node waits for a round
//   left/<node>    the node finished
// Each node writes only its own keys, so joins do not contend; the state
// changes by one compare-and-swap per round, failure or lost node.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/rendezvous/messages.h"

namespace ddprun::rendezvous::etcd {

// One node as it joins (the value of its joining key).
struct NodeInfo {
  std::string id;
  std::int64_t requestedRank = -1;
  std::uint32_t localWorldSize = 1;
  std::string address;
  std::uint32_t masterPort = 0;
  std::int64_t firstSeen = 0;   // its alive key's create revision: arrival order
  std::int64_t joinedAtMs = 0;  // Unix ms, its own clock
};

enum class Phase { kForming, kRunning, kClosed };

struct RoundState {
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;
  std::int64_t maxRestarts = 0;
  std::int64_t round = 0;  // rounds completed
  Phase phase = Phase::kForming;
  std::int64_t formingSinceMs = 0;  // when the round being formed opened
  std::int64_t restarts = 0;
  std::vector<NodeInfo> participants;  // the running round's, by group rank
  std::vector<std::string> expected;   // the ended round's nodes
  std::string endedReason;
  protocol::FailureSummary lastFailure;
  std::int64_t failedExitCode = 0;  // kClosed
  std::string failureReport;
};

std::string toJson(const NodeInfo& node);
std::optional<NodeInfo> nodeFromJson(const std::string& text);
std::string toJson(const RoundState& state);
std::optional<RoundState> stateFromJson(const std::string& text);

// Everything under one rendezvous's prefix, as one node last saw it.
struct View {
  bool loaded = false;
  std::int64_t revision = 0;       // the watch has seen every change up to here
  std::int64_t stateRevision = 0;  // the state key's mod revision, 0: absent
  std::int64_t stateSeen = 0;      // the revision of the state's last change seen
  std::optional<RoundState> state;
  std::map<std::string, NodeInfo> joining;
  std::set<std::string> alive;
  std::set<std::string> left;
};

// Key names under the rendezvous's base ("<prefix>/<rdzv_id>/").
struct Keys {
  std::string base;
  std::string state() const { return base + "state"; }
  std::string alive(const std::string& node) const { return base + "alive/" + node; }
  std::string joining(const std::string& node) const { return base + "joining/" + node; }
  std::string left(const std::string& node) const { return base + "left/" + node; }
};

// Applies one key's new value (or deletion, `value` null) at `modRevision`
// to the view; true when it changed the state key. A state older than the
// view's is ignored (a compare-and-swap's result may arrive before the
// watch delivers it).
bool apply(View& view, const Keys& keys, const std::string& key, const std::string* value,
           std::int64_t modRevision);

// A new rendezvous's state, as the first JOIN fixes it.
RoundState initialState(const protocol::JoinRequest& request, std::int64_t nowMs);

// The forming round's completion: the new state when it is complete now,
// else nullopt with `wakeAtMs` set when the last call will end it (0: it
// waits for more nodes).
std::optional<RoundState> completeIfReady(const View& view, std::int64_t nowMs,
                                          std::int64_t& wakeAtMs);
// The running round ends (a failure, a lost node, a node asking to join).
RoundState endRound(const RoundState& state, const std::string& reason, std::int64_t nowMs);
// `nodeId`'s assignment in the running round, if it takes part.
std::optional<protocol::Assignment> assignmentOf(const RoundState& state,
                                                 const std::string& nodeId);
// The round being formed, in RENDEZVOUS_STATUS's terms.
protocol::RendezvousStatus statusOf(const View& view, bool details, std::int64_t nowMs);

}  // namespace ddprun::rendezvous::etcd
