// The rendezvous state ddprun keeps in etcd (docs/multinode.md, "etcd";
// docs/architecture.md), its keys, and the pure decisions on it. Under
// <prefix>/<rdzv_id>/:
//   state              small, whatever N: the job's settings, the round
//                      (phase, number, world, master, publish id), restarts,
//                      hosts' failure streaks and exclusions, the last
//                      failure, a fixed set's lost nodes; changed only by
//                      compare-and-swap
//   round/<r>          round r's nodes by group rank, written once
//   assign/<node>      the node's place in the round, written once a round
//   failure/<r>/<node> a failing node's address and failure time
//   left/<node>        the node left: "<round> <exit code>" (its ddprun's
//                      code; not 0: it left while the others may train,
//                      and is a lost node named with leftJobText)
// and, on each node's own lease (gone when the node stops renewing it):
//   alive/<node>       the node is there; the create revisions order the
//                      nodes: the oldest is the coordinator
//   joining/<node>     the node waits for a round (its NodeInfo)
//   rank/<n>           --node_rank n, claimed by the node named in the value
// Every key not on a node's lease is on the job's lease (RoundState::jobLease),
// which every node renews: once no node of the job is left, the job's keys
// expire after the job TTL and its id starts afresh.
//
// Each node writes only its own keys and reads `state` (and its assign key);
// one coordinator reads everything and writes the rounds, so a round costs
// O(N) requests, events and bytes.
//
// The rules are the round policy's (ddprun/rendezvous/round_policy.h, shared
// with the store server): the state's settings, hosts and lost nodes are its
// values (settings(), HostRecord, LostNode), a node's joining key maps to
// its Member (memberOf()), and what is left here is how they are kept in
// etcd.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/messages.h"
#include "ddprun/rendezvous/round_state.h"

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

// A host's failure streak and exclusion (the policy's; only hosts with a
// streak or an exclusion are kept).
using HostRecord = policy::HostRecord;

// A node of a fixed set (RoundState::fixedNodes) whose alive key went
// without a leave: it never returns.
using LostNode = policy::LostNode;

// The policy's view of a joining node (its arrival: `firstSeen`).
policy::Member memberOf(const NodeInfo& node);

enum class Phase { kForming, kRunning, kClosed };

struct RoundState {
  // Fixed by the node that created the rendezvous.
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;
  std::int64_t maxRestarts = 0;
  std::uint32_t maxNodeFailures = 0;  // 0: never exclude a host
  std::uint32_t nodeCooldownMs = 0;
  std::int64_t jobLease = 0;  // the lease of every job key
  // The nodes that can ever take part (a Slurm job step's); 0: any node may
  // join later.
  std::uint32_t fixedNodes = 0;
  // The round.
  std::int64_t round = 0;  // rounds completed
  Phase phase = Phase::kForming;
  std::int64_t formingSinceMs = 0;   // when the round being formed opened
  std::string publishId;             // the running round's; its assign keys carry it
  std::uint32_t groupWorldSize = 0;  // nodes in the running round
  std::uint32_t worldSize = 0;       // workers in the running round
  std::string masterAddr;
  std::uint32_t masterPort = 0;
  std::int64_t restarts = 0;
  std::string endedReason;
  std::int64_t attributedRound = 0;         // the last round whose failures were attributed
  std::map<std::string, HostRecord> hosts;  // only hosts with a streak or an exclusion
  protocol::FailureSummary lastFailure;
  std::int64_t failedExitCode = 0;  // kClosed
  std::string failureReport;
  // With fixedNodes: every node lost so far, by node id (they count against
  // MIN for good; at most fixedNodes - MIN + 1 of them).
  std::map<std::string, LostNode> lost;

  // The policy's settings, from the fields above.
  policy::Settings settings() const;
};

// A node's place in a round (its assign key).
struct AssignRecord {
  std::int64_t round = 0;
  std::string publishId;
  std::uint32_t groupRank = 0;
  std::uint32_t rankOffset = 0;
};

// A failing node's report of round r (its failure key).
struct FailureRecord {
  std::string address;
  std::int64_t failedAtMs = 0;
  bool lostAPeer = false;  // a knock-on failure (absent in older records: false)
};

std::string toJson(const NodeInfo& node);
std::optional<NodeInfo> nodeFromJson(const std::string& text);
std::string toJson(const RoundState& state);
std::optional<RoundState> stateFromJson(const std::string& text);
std::string toJson(const AssignRecord& record);
std::optional<AssignRecord> assignFromJson(const std::string& text);
std::string toJson(const FailureRecord& record);
std::optional<FailureRecord> failureFromJson(const std::string& text);
std::string participantsToJson(const std::vector<NodeInfo>& participants);
std::vector<NodeInfo> participantsFromJson(const std::string& text);

// Key names under the rendezvous's base ("<prefix>/<rdzv_id>/").
struct Keys {
  std::string base;
  std::string state() const { return base + "state"; }
  std::string alive(const std::string& node) const { return base + "alive/" + node; }
  // The alive key of the node that registered last (on its lease): a new
  // node's predecessor, read and replaced in its registration.
  std::string newest() const { return base + "newest"; }
  std::string joining(const std::string& node) const { return base + "joining/" + node; }
  std::string left(const std::string& node) const { return base + "left/" + node; }
  // The node's relay counters (on its lease), for `ddprun status`.
  // A node's counters (protocol::NodeCounters): relay/<node>, downtime/<node>.
  std::string counters(rendezvous::protocol::NodeCounters kind, const std::string& node) const {
    return base + (kind == rendezvous::protocol::NodeCounters::kRelay ? "relay/" : "downtime/") +
           node;
  }
  std::string assign(const std::string& node) const { return base + "assign/" + node; }
  std::string rank(std::int64_t nodeRank) const {
    return base + "rank/" + std::to_string(nodeRank);
  }
  std::string round(std::int64_t r) const { return base + "round/" + std::to_string(r); }
  std::string failures(std::int64_t r) const { return base + "failure/" + std::to_string(r) + "/"; }
  std::string failure(std::int64_t r, const std::string& node) const { return failures(r) + node; }
};

// A new rendezvous's state, as the first JOIN fixes it.
RoundState initialState(const protocol::JoinRequest& request, std::int64_t nowMs,
                        std::int64_t jobLease);

// `state` with round + 1 running over `participants`.
RoundState startRound(const RoundState& state, const std::vector<NodeInfo>& participants,
                      const std::string& publishId);

// Each participant's assign record, by group rank.
std::vector<AssignRecord> assignments(const RoundState& running,
                                      const std::vector<NodeInfo>& participants);

// The running round ends (a failure, a lost node, a node asking to join).
RoundState endRound(const RoundState& state, const std::string& reason, std::int64_t nowMs);

// `state` with `lost` (node id -> what it was) recorded, when nodes of a
// fixed set were lost (their alive keys gone without a leave): once fewer
// than MIN can be left (policy::cannotReachMinimum) the job is closed with
// exit code 1 and policy::lostNodesReport(); otherwise a running round ends
// with `endReason` (when not "": a lost node took part in it) and a
// forming one goes on without them.
RoundState loseNodes(const RoundState& state, const std::map<std::string, LostNode>& lost,
                     const std::string& endReason, std::int64_t nowMs);

// `nodeId`'s assignment when `record` belongs to `state`'s running round.
std::optional<protocol::Assignment> assignmentOf(const RoundState& state,
                                                 const AssignRecord& record);

// The reason etcd gives for a node lost (the policy's LostNode::reason).
inline constexpr const char* kLeaseLapsed = "stopped renewing its etcd lease";

// A left/<node> key's value, and the exit code in one (0 when it has none:
// a value of an older ddprun, only the round).
std::string leftValue(std::int64_t round, std::int64_t exitCode);
std::int64_t leftExitCode(const std::string& value);

// Why `node`, whose alive key went, is lost, given the exit codes the nodes
// that wrote a left key left with: it left with a non-zero code, or it
// stopped renewing its lease (no left key). nullopt: it left with 0, its
// workers done, so it is not lost.
std::optional<std::string> lostReason(const std::map<std::string, std::int64_t>& left,
                                      const std::string& node);

}  // namespace ddprun::rendezvous::etcd
