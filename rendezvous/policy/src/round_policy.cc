#include "ddprun/rendezvous/round_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "ddprun/rendezvous/round_text.h"

namespace ddprun::rendezvous::policy {

namespace {

std::int64_t rankKey(const Member& m) {
  return m.requestedRank >= 0 ? m.requestedRank : std::numeric_limits<std::int64_t>::max();
}

}  // namespace

std::vector<Member> orderRound(std::vector<Member> joined, std::uint32_t maxNodes) {
  std::sort(joined.begin(), joined.end(), [](const Member& a, const Member& b) {
    return std::tuple(rankKey(a), a.firstSeen, a.id) < std::tuple(rankKey(b), b.firstSeen, b.id);
  });
  if (joined.size() > maxNodes) joined.resize(maxNodes);
  return joined;
}

std::vector<protocol::Assignment> placeRound(const std::vector<Member>& ordered, std::int64_t round,
                                             std::int64_t restarts) {
  protocol::Assignment a;
  a.round = round;
  a.groupWorldSize = static_cast<std::uint32_t>(ordered.size());
  a.worldSize = 0;
  for (const auto& m : ordered) a.worldSize += m.localWorldSize;
  a.restarts = restarts;
  if (!ordered.empty()) {
    a.masterAddr = ordered.front().address;
    a.masterPort = ordered.front().masterPort;
  }
  std::vector<protocol::Assignment> out;
  std::uint32_t offset = 0;
  for (std::uint32_t rank = 0; rank < ordered.size(); ++rank) {
    a.groupRank = rank;
    a.rankOffset = offset;
    offset += ordered[rank].localWorldSize;
    out.push_back(a);
  }
  return out;
}

Readiness readiness(const Settings& s, const Forming& forming, std::int64_t minReachedAtMs,
                    std::int64_t nowMs) {
  Readiness r;
  if (forming.joined >= s.maxNodes) {
    r.ready = true;
    return r;
  }
  if (forming.joined < s.minNodes) return r;  // the last call starts again at MIN
  r.minReachedAtMs = minReachedAtMs >= 0 ? minReachedAtMs : nowMs;
  const bool allBack = forming.expected > 0 && forming.expectedBack >= forming.expected;
  const std::int64_t end = r.minReachedAtMs + s.lastCallMs;
  if (s.lastCallMs == 0 || allBack || nowMs >= end) {
    r.ready = true;
    return r;
  }
  r.wakeAtMs = end;
  r.lastCallLeftMs = end - nowMs;
  return r;
}

std::string endOnJoin(const Settings& s, std::size_t participants, bool participant,
                      const std::string& nodeId) {
  if (participant) return joinedAgainText(nodeId);
  if (participants < s.maxNodes) return askedToJoinText(nodeId);
  return "";
}

FailureOutcome spendRestart(const Settings& s, std::int64_t restarts, const std::string& nodeId,
                            bool giveUp) {
  FailureOutcome out;
  out.restarts = restarts;
  if (giveUp || restarts >= s.maxRestarts) return out;  // the job fails
  out.restarts = restarts + 1;
  out.restartAllowed = true;
  out.endReason = failedText(nodeId, out.restarts, s.maxRestarts);
  return out;
}

std::optional<Failure> blame(const std::vector<Failure>& failures) {
  std::optional<Failure> blamed;
  for (const auto& f : failures) {
    if (f.lostAPeer) continue;
    if (!blamed || std::tie(f.failedAtMs, f.address, f.node) <
                       std::tie(blamed->failedAtMs, blamed->address, blamed->node)) {
      blamed = f;
    }
  }
  return blamed;
}

namespace {

void dropEmptyHosts(std::map<std::string, HostRecord>& hosts) {
  std::erase_if(
      hosts, [](const auto& h) { return h.second.streak == 0 && h.second.excludedUntilMs == 0; });
}

}  // namespace

Attribution attributeFailures(const Settings& s, std::map<std::string, HostRecord>& hosts,
                              const std::set<std::string>& roundHosts,
                              const std::vector<Failure>& failures,
                              const std::vector<Member>& joining, std::int64_t nowMs) {
  Attribution out;
  const auto blamed = blame(failures);
  if (!blamed) return out;  // ended by a membership change
  out.blamed = blamed->address;
  // Streaks matter only for exclusion: a static job, or one that never
  // excludes, keeps none (etcd's state stays small).
  if (!s.elastic() || s.maxNodeFailures == 0) return out;
  // Only the ended round's hosts: a host's streak counts its own rounds.
  for (const auto& address : roundHosts) {
    if (address != blamed->address) {
      if (auto it = hosts.find(address); it != hosts.end()) it->second.streak = 0;
    }
  }
  HostRecord& host = hosts[blamed->address];
  ++host.streak;
  host.node = blamed->node;
  out.streak = host.streak;
  dropEmptyHosts(hosts);
  if (host.excludedUntilMs > nowMs || host.streak < static_cast<std::int64_t>(s.maxNodeFailures)) {
    return out;
  }
  const auto others = std::count_if(joining.begin(), joining.end(),
                                    [&](const Member& m) { return m.address != blamed->address; });
  if (static_cast<std::size_t>(others) < s.minNodes) {
    out.stays = true;
    return out;
  }
  // The streak stays while the host is out (its refusals name it); the
  // readmission clears it.
  host.excludedUntilMs = nowMs + s.nodeCooldownMs;
  out.exclusion = Exclusion{blamed->address, blamed->node, host.streak, host.excludedUntilMs};
  return out;
}

bool excluded(const std::map<std::string, HostRecord>& hosts, const std::string& address,
              std::int64_t nowMs) {
  const auto host = hosts.find(address);
  return host != hosts.end() && host->second.excludedUntilMs > nowMs;
}

std::vector<std::string> readmit(std::map<std::string, HostRecord>& hosts, std::int64_t nowMs) {
  std::vector<std::string> out;
  for (auto& [address, host] : hosts) {
    if (host.excludedUntilMs != 0 && host.excludedUntilMs <= nowMs) {
      host.excludedUntilMs = 0;
      host.streak = 0;
      out.push_back(address);
    }
  }
  dropEmptyHosts(hosts);
  return out;
}

std::int64_t nextCooldownEnd(const std::map<std::string, HostRecord>& hosts) {
  std::int64_t next = -1;
  for (const auto& [address, host] : hosts) {
    if (host.excludedUntilMs != 0 && (next < 0 || host.excludedUntilMs < next)) {
      next = host.excludedUntilMs;
    }
  }
  return next;
}

Formation formRound(const FormInput& in, std::int64_t nowMs) {
  Formation out;
  out.hosts = in.hosts;
  std::vector<Member> joining;
  for (const auto& m : in.joining) {
    if (!excluded(in.hosts, m.address, nowMs)) joining.push_back(m);
  }
  const Readiness ready = readiness(in.settings, {joining.size(), in.expected, in.expectedBack},
                                    in.minReachedAtMs, nowMs);
  out.minReachedAtMs = ready.minReachedAtMs;
  out.lastCallLeftMs = ready.lastCallLeftMs;
  const auto wakeAt = [&out](std::int64_t at) {
    if (at >= 0 && (out.wakeAtMs < 0 || at < out.wakeAtMs)) out.wakeAtMs = at;
  };
  wakeAt(ready.wakeAtMs);
  if (ready.ready) {
    // The ended round's failure goes to the host that failed first; a host
    // that keeps failing may be left out of the round being formed.
    if (in.round > 0 && !in.failures.empty()) {
      const Attribution& a = out.attribution =
          attributeFailures(in.settings, out.hosts, in.roundHosts, in.failures, joining, nowMs);
      out.attributed = true;
      if (a.exclusion) {
        std::erase_if(joining, [&](const Member& m) { return m.address == a.exclusion->address; });
      }
    }
    if (joining.size() >= in.settings.minNodes) {
      out.form = true;
      out.participants = orderRound(std::move(joining), in.settings.maxNodes);
      out.minReachedAtMs = -1;
      out.lastCallLeftMs = -1;
    }
  }
  wakeAt(nextCooldownEnd(out.hosts));
  return out;
}

bool cannotReachMinimum(const Settings& s, std::size_t lost) {
  return s.fixedNodes > 0 && s.fixedNodes < s.minNodes + lost;
}

void releaseLost(std::map<std::string, LostNode>& lost, const Member& joining) {
  lost.erase(joining.id);
  if (joining.requestedRank >= 0) {
    std::erase_if(
        lost, [&](const auto& entry) { return entry.second.nodeRank == joining.requestedRank; });
  }
}

void describeMissing(const Settings& s, const std::map<std::string, LostNode>& lost,
                     const std::vector<NotBack>& notBack, const std::vector<Member>& joining,
                     protocol::RendezvousStatus& st) {
  std::set<std::string> waiting;
  for (const auto& m : joining) waiting.insert(m.id);
  std::set<std::int64_t> named;  // node ranks already described
  const auto add = [&st](std::string text) {
    ++st.missingCount;
    if (st.missing.size() < protocol::kMaxMissingShown) st.missing.push_back(std::move(text));
  };
  // The nodes that were lost first: they are why the others wait.
  for (const auto& [id, node] : lost) {
    if (waiting.contains(id)) continue;
    add(protocol::lostNodeText(id, node.address, node.nodeRank, node.reason));
    if (node.nodeRank >= 0) named.insert(node.nodeRank);
  }
  // The ended round's nodes that are still there but not back yet; each
  // with the node rank it asks for, else the group rank it had.
  for (const auto& [m, groupRank] : notBack) {
    if (waiting.contains(m.id) || lost.contains(m.id)) continue;
    const std::int64_t rank = m.requestedRank >= 0 ? m.requestedRank : groupRank;
    add(protocol::nodeText(m.id, m.address, rank) + ", not back yet");
    if (m.requestedRank >= 0) named.insert(m.requestedRank);
  }
  // Every node asks for its rank (static jobs, Slurm steps): the ranks
  // nobody has taken or been named for.
  if (joining.empty()) return;
  std::set<std::int64_t> taken;
  for (const auto& m : joining) {
    if (m.requestedRank < 0) return;
    taken.insert(m.requestedRank);
  }
  for (std::int64_t rank = 0; rank < static_cast<std::int64_t>(s.maxNodes); ++rank) {
    if (!taken.contains(rank) && !named.contains(rank)) add(fmt::format("node rank {}", rank));
  }
}

}  // namespace ddprun::rendezvous::policy
