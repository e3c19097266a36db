// The round policy: the rules of a rendezvous round, written once and
// driven by both backends (the store server's RendezvousManager and etcd's
// coordinator and nodes; docs/architecture.md, "One round policy"). Pure
// functions of round_state.h's values; time is passed in (nowMs), nothing
// here reads a clock, blocks or does I/O. What a backend does with a
// result (answer JOINs, push events, write etcd, arm its one wake timer at
// `wakeAtMs`) is its own.
//
// The rules (torchelastic's dynamic rendezvous is the floor):
//  - ranks: requested node ranks first, then the order of first arrival
//    (then the id); at most MAX nodes; rank offsets follow local world sizes;
//    group rank 0's address and port are the master's.
//  - readiness: MAX joined; or MIN joined and either every node of the ended
//    round still there has joined again, or the last call (lastCallMs from
//    the moment MIN was reached; it starts again when the count falls below
//    MIN and reaches it again) has passed, or there is no last call.
//  - a running round ends when a participant is lost or fails, when a
//    participant joins again, or when another node asks to join while the
//    round has fewer than MAX nodes (else that node waits for a slot).
//  - the restart budget: a worker failure in the running round, reported by
//    one of its nodes, spends one restart of the job's budget and ends the
//    round; with none left the job fails. Membership changes spend nothing.
//  - blame: when the next round forms, the ended round's earliest failure
//    (ties: the lower address, then node id) that did not lose a peer is
//    its host's; that host's streak grows, the round's other hosts start
//    again from 0. A round whose failures all lost a peer (the knock-on of
//    a lost node) is blamed on no one and changes no streak.
//  - exclusion (elastic jobs with maxNodeFailures > 0): a host whose streak
//    reaches maxNodeFailures is left out for nodeCooldownMs if MIN nodes
//    are waiting without it; it is readmitted when the cooldown ends.
//  - lost nodes: a node lost without leaving is named in the waiting
//    nodes' progress and timeout text until a round forms without it; in a
//    fixed set (a Slurm step's fixedNodes) it counts against MIN for good,
//    unless a node with its id or node rank joins again, and once fewer
//    than MIN can be left the job fails at once.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/rendezvous/messages.h"
#include "ddprun/rendezvous/round_state.h"

namespace ddprun::rendezvous::policy {

// --- ranks -------------------------------------------------------------------

// The round's nodes from those waiting, by group rank: requested node ranks
// first, then first arrival, then the id; at most `maxNodes`.
std::vector<Member> orderRound(std::vector<Member> joined, std::uint32_t maxNodes);

// Each node's assignment in round `round` over `ordered` (orderRound()'s),
// by group rank; `restarts` spent so far.
std::vector<protocol::Assignment> placeRound(const std::vector<Member>& ordered, std::int64_t round,
                                             std::int64_t restarts);

// --- readiness and the last call ----------------------------------------------

// A round being formed, counted by the backend.
struct Forming {
  std::size_t joined = 0;        // nodes waiting in JOIN (none of an excluded host)
  std::size_t expected = 0;      // the ended round's nodes still there (not lost, not left)
  std::size_t expectedBack = 0;  // of those, the ones waiting again
};

struct Readiness {
  bool ready = false;
  std::int64_t minReachedAtMs = -1;  // keep it for the next call; -1: fewer than MIN
  std::int64_t wakeAtMs = -1;        // when to look again without an event; -1: only on one
  std::int64_t lastCallLeftMs = -1;  // for status; -1: not counting
};

// Whether the round can form now; `minReachedAtMs` is the previous call's.
Readiness readiness(const Settings& settings, const Forming& forming, std::int64_t minReachedAtMs,
                    std::int64_t nowMs);

// --- the running round -----------------------------------------------------------

// Why a JOIN of `nodeId` while a round of `participants` nodes runs ends it:
// a participant joins again, or another node asks while there is room.
// "" when the round goes on (full: the node waits for a slot).
std::string endOnJoin(const Settings& settings, std::size_t participants, bool participant,
                      const std::string& nodeId);

// What a worker failure reported for the running round decides.
struct FailureOutcome {
  std::int64_t restarts = 0;  // spent so far, this one included
  bool restartAllowed = false;
  std::string endReason;  // the round's end (restart allowed); else the job failed
};
// `giveUp`: the node asks the job to stop (a crash loop): it fails
// whatever budget is left.
FailureOutcome spendRestart(const Settings& settings, std::int64_t restarts,
                            const std::string& nodeId, bool giveUp = false);

// --- blame, streaks and host exclusion ------------------------------------------

// The failure the ended round is blamed on: the earliest (ties: the lower
// address, then the lower node id) of those that did not lose a peer;
// nullopt when none such was reported. Times alone cannot tell a cause from
// its knock-ons: a worker whose peer died fails within milliseconds, and
// the failing nodes' agents see and report their exits in any order.
std::optional<Failure> blame(const std::vector<Failure>& failures);

struct Exclusion {
  std::string address;
  std::string node;  // whose failure counted last
  std::int64_t streak = 0;
  std::int64_t untilMs = 0;
  bool operator==(const Exclusion&) const = default;
};

struct Attribution {
  std::string blamed;                  // the blamed host; "" when no failure
  std::int64_t streak = 0;             // its streak now
  std::optional<Exclusion> exclusion;  // the host left out now
  bool stays = false;  // at its limit but kept: fewer than MIN would wait without it (log it)
};

// Applies the ended round's `failures` to `hosts` (only in an elastic job
// with maxNodeFailures > 0: else streaks serve nothing and none is kept):
// the blamed host's streak
// grows, the other hosts of that round (`roundHosts`) start again from 0,
// hosts with nothing to remember are dropped; then excludes the blamed host
// if the job is elastic with maxNodeFailures > 0, its streak has reached
// the limit and MIN of `joining` are on other hosts.
Attribution attributeFailures(const Settings& settings, std::map<std::string, HostRecord>& hosts,
                              const std::set<std::string>& roundHosts,
                              const std::vector<Failure>& failures,
                              const std::vector<Member>& joining, std::int64_t nowMs);

// Whether `address` is excluded at `nowMs`.
bool excluded(const std::map<std::string, HostRecord>& hosts, const std::string& address,
              std::int64_t nowMs);

// Ends the cooldowns over at `nowMs` (those hosts start again with no
// streak); returns their addresses.
std::vector<std::string> readmit(std::map<std::string, HostRecord>& hosts, std::int64_t nowMs);

// When the next cooldown ends; -1: none runs.
std::int64_t nextCooldownEnd(const std::map<std::string, HostRecord>& hosts);

// --- forming a round --------------------------------------------------------------

// What the backend knows when it tries to form the next round.
struct FormInput {
  Settings settings;
  std::int64_t round = 0;  // rounds formed so far
  std::map<std::string, HostRecord> hosts;
  std::vector<Member> joining;       // waiting in JOIN
  std::size_t expected = 0;          // see Forming
  std::size_t expectedBack = 0;      // see Forming
  std::set<std::string> roundHosts;  // the ended round's hosts
  std::vector<Failure> failures;     // the ended round's, not attributed yet
  std::int64_t minReachedAtMs = -1;  // the previous Formation's
};

struct Formation {
  bool form = false;                 // round + 1 forms over `participants`
  std::vector<Member> participants;  // by group rank
  bool attributed = false;           // `failures` were applied: `hosts` is the new table
  std::map<std::string, HostRecord> hosts;
  // The blame; its exclusion: tell every node, refuse that host's waiting JOINs.
  Attribution attribution;
  std::int64_t minReachedAtMs = -1;  // keep it
  std::int64_t wakeAtMs = -1;        // the last call's end or the next cooldown's; -1: none
  std::int64_t lastCallLeftMs = -1;
};

// Readiness, then (once ready) the blame of the ended round's failures and
// any exclusion, then the order of the nodes that remain.
Formation formRound(const FormInput& input, std::int64_t nowMs);

// --- lost nodes ---------------------------------------------------------------------

// With a fixed set of nodes: whether `lost` of them leave fewer than MIN
// that can ever join.
bool cannotReachMinimum(const Settings& settings, std::size_t lost);

// A node that joins replaces a lost one of its id or node rank (a static
// node restarted).
void releaseLost(std::map<std::string, LostNode>& lost, const Member& joining);

// --- what a waiting node is told ---------------------------------------------------------

// A node of the ended round not back yet (still there).
struct NotBack {
  Member member;
  std::uint32_t groupRank = 0;  // its group rank in the ended round
};

// Fills status.missing (at most protocol::kMaxMissingShown) and
// missingCount: the lost nodes first (they are why the others wait), then
// the ended round's nodes not back yet, then, when every waiting node asks
// for a node rank, the ranks nobody has taken or been named for. None when
// nothing is known (elastic growth).
void describeMissing(const Settings& settings, const std::map<std::string, LostNode>& lost,
                     const std::vector<NotBack>& notBack, const std::vector<Member>& joining,
                     protocol::RendezvousStatus& status);

}  // namespace ddprun::rendezvous::policy
