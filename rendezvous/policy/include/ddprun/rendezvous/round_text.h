// The words of the round policy (round_policy.h): what a refused JOIN, an
// ended round, an exclusion, a readmission, a failed job and a timed-out
// JOIN say. One text per event, the same from the store server and from
// etcd; each part that came from another node is made printable.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ddprun/rendezvous/messages.h"
#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/round_state.h"

namespace ddprun::rendezvous::policy {

// Why `request` may not join rendezvous `rdzvId` of `settings` (another
// --nnodes or --max_restarts); "" when it fits.
std::string settingsMismatch(const std::string& rdzvId, const Settings& settings,
                             const protocol::JoinRequest& request);

// "node rank 1 is already taken by node n2; give every node its own --node_rank"
std::string rankTaken(std::int64_t nodeRank, const std::string& holder);

// A running round's end: a worker failed (restart `restarts` of the budget),
// a node was lost, asked to join, or joined again.
std::string failedText(const std::string& nodeId, std::int64_t restarts, std::int64_t maxRestarts);
std::string lostText(const std::string& nodeId, const std::string& reason);
// The line a failure's report gets when another node's workers had all
// finished in that round: it will not rejoin, so no restart can re-form the
// job ("ddprun: not restarting: ...\n").
std::string finishedNodeText(const std::string& nodeId);
std::string askedToJoinText(const std::string& nodeId);
std::string joinedAgainText(const std::string& nodeId);

// The kNodeExcluded event (and log line, with a full stop).
std::string exclusionText(const std::string& rdzvId, const Settings& settings,
                          const Exclusion& exclusion);
// A JOIN of an excluded host refused (kExcluded): the seconds left, rounded up.
std::string refusalText(const std::string& rdzvId, const Settings& settings,
                        const std::string& nodeId, const std::string& address,
                        const HostRecord& host, std::int64_t nowMs);
// The kNodeReadmitted event.
std::string readmittedText(const std::string& rdzvId, const std::string& address);
// A host at its limit that stays (the log, without its full stop).
std::string staysText(const std::string& rdzvId, const std::string& address, std::int64_t streak,
                      std::uint32_t minNodes);

// The report of a fixed set that lost too many nodes, as every node prints
// it: "ddprun: error: the job lost a node: ... .\n".
std::string lostNodesReport(const Settings& settings, const std::map<std::string, LostNode>& lost);

// A JOIN that timed out: "rendezvous 'job' did not complete: 2 of 3 nodes
// joined; missing: ...".
std::string joinTimeoutText(const std::string& rdzvId, const protocol::RendezvousStatus& status);

}  // namespace ddprun::rendezvous::policy
