#include "etcd_round.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/round_text.h"

namespace ddprun::rendezvous::etcd {

using json = nlohmann::json;

namespace {

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kForming:
      return "forming";
    case Phase::kRunning:
      return "running";
    case Phase::kClosed:
      return "closed";
  }
  return "forming";
}

json nodeJson(const NodeInfo& n) {
  return {{"id", n.id},
          {"rank", n.requestedRank},
          {"local_world_size", n.localWorldSize},
          {"address", n.address},
          {"master_port", n.masterPort},
          {"first_seen", n.firstSeen},
          {"joined_at_ms", n.joinedAtMs}};
}

NodeInfo nodeOf(const json& j) {
  NodeInfo n;
  n.id = j.at("id").get<std::string>();
  n.requestedRank = j.value("rank", std::int64_t{-1});
  n.localWorldSize = std::max<std::uint32_t>(1, j.value("local_world_size", 1u));
  n.address = j.value("address", "");
  n.masterPort = j.value("master_port", 0u);
  n.firstSeen = j.value("first_seen", std::int64_t{0});
  n.joinedAtMs = j.value("joined_at_ms", std::int64_t{0});
  return n;
}

// Parses `text` as a JSON object and reads it with `read`; nullopt when it
// is not one or lacks what `read` needs.
template <typename T, typename Read>
std::optional<T> parsed(const std::string& text, Read read) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    return read(j);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

policy::Member memberOf(const NodeInfo& n) {
  return {n.id, n.requestedRank, n.localWorldSize, n.address, n.masterPort, n.firstSeen};
}

policy::Settings RoundState::settings() const {
  return {minNodes, maxNodes, lastCallMs, maxRestarts, maxNodeFailures, nodeCooldownMs, fixedNodes};
}

std::string toJson(const NodeInfo& node) { return nodeJson(node).dump(); }

std::optional<NodeInfo> nodeFromJson(const std::string& text) {
  return parsed<NodeInfo>(text, [](const json& j) { return nodeOf(j); });
}

std::string toJson(const RoundState& s) {
  json hosts = json::object();
  for (const auto& [address, host] : s.hosts) {
    hosts[address] = {
        {"streak", host.streak}, {"excluded_until_ms", host.excludedUntilMs}, {"node", host.node}};
  }
  json lost = json::object();
  for (const auto& [id, node] : s.lost) {
    lost[id] = {{"address", node.address}, {"node_rank", node.nodeRank}, {"reason", node.reason}};
  }
  return json{{"min_nodes", s.minNodes},
              {"max_nodes", s.maxNodes},
              {"last_call_ms", s.lastCallMs},
              {"max_restarts", s.maxRestarts},
              {"max_node_failures", s.maxNodeFailures},
              {"node_cooldown_ms", s.nodeCooldownMs},
              {"job_lease", s.jobLease},
              {"fixed_nodes", s.fixedNodes},
              {"round", s.round},
              {"phase", phaseName(s.phase)},
              {"forming_since_ms", s.formingSinceMs},
              {"publish_id", s.publishId},
              {"group_world_size", s.groupWorldSize},
              {"world_size", s.worldSize},
              {"master_addr", s.masterAddr},
              {"master_port", s.masterPort},
              {"restarts", s.restarts},
              {"ended_reason", s.endedReason},
              {"attributed_round", s.attributedRound},
              {"hosts", hosts},
              {"last_failure",
               {{"node", s.lastFailure.nodeId},
                {"round", s.lastFailure.round},
                {"exit_code", s.lastFailure.exitCode},
                {"failed_at_ms", s.lastFailure.failedAtMs},
                {"report", s.lastFailure.report}}},
              {"failed_exit_code", s.failedExitCode},
              {"failure_report", s.failureReport},
              {"lost", lost}}
      .dump();
}

std::optional<RoundState> stateFromJson(const std::string& text) {
  return parsed<RoundState>(text, [](const json& j) {
    RoundState s;
    s.minNodes = j.at("min_nodes").get<std::uint32_t>();
    s.maxNodes = j.at("max_nodes").get<std::uint32_t>();
    s.lastCallMs = j.value("last_call_ms", 0u);
    s.maxRestarts = j.value("max_restarts", std::int64_t{0});
    s.maxNodeFailures = j.value("max_node_failures", 0u);
    s.nodeCooldownMs = j.value("node_cooldown_ms", 0u);
    s.jobLease = j.value("job_lease", std::int64_t{0});
    s.fixedNodes = j.value("fixed_nodes", 0u);
    s.round = j.value("round", std::int64_t{0});
    const std::string phase = j.value("phase", "forming");
    s.phase = phase == "running"  ? Phase::kRunning
              : phase == "closed" ? Phase::kClosed
                                  : Phase::kForming;
    s.formingSinceMs = j.value("forming_since_ms", std::int64_t{0});
    s.publishId = j.value("publish_id", "");
    s.groupWorldSize = j.value("group_world_size", 0u);
    s.worldSize = j.value("world_size", 0u);
    s.masterAddr = j.value("master_addr", "");
    s.masterPort = j.value("master_port", 0u);
    s.restarts = j.value("restarts", std::int64_t{0});
    s.endedReason = j.value("ended_reason", "");
    s.attributedRound = j.value("attributed_round", std::int64_t{0});
    const json hosts = j.value("hosts", json::object());  // outlives the loop
    for (const auto& [address, host] : hosts.items()) {
      s.hosts[address] = {host.value("streak", std::int64_t{0}),
                          host.value("excluded_until_ms", std::int64_t{0}), host.value("node", "")};
    }
    if (const auto f = j.find("last_failure"); f != j.end() && f->is_object()) {
      s.lastFailure.nodeId = f->value("node", "");
      s.lastFailure.round = f->value("round", std::int64_t{0});
      s.lastFailure.exitCode = f->value("exit_code", std::int64_t{0});
      s.lastFailure.failedAtMs = f->value("failed_at_ms", std::int64_t{0});
      s.lastFailure.report = f->value("report", "");
    }
    s.failedExitCode = j.value("failed_exit_code", std::int64_t{0});
    s.failureReport = j.value("failure_report", "");
    const json lost = j.value("lost", json::object());  // outlives the loop
    for (const auto& [id, node] : lost.items()) {
      s.lost[id] = {node.value("address", ""), node.value("node_rank", std::int64_t{-1}),
                    node.value("reason", "")};
    }
    return s;
  });
}

std::string toJson(const AssignRecord& a) {
  return json{{"round", a.round},
              {"publish_id", a.publishId},
              {"group_rank", a.groupRank},
              {"rank_offset", a.rankOffset}}
      .dump();
}

std::optional<AssignRecord> assignFromJson(const std::string& text) {
  return parsed<AssignRecord>(text, [](const json& j) {
    return AssignRecord{j.at("round").get<std::int64_t>(), j.at("publish_id").get<std::string>(),
                        j.at("group_rank").get<std::uint32_t>(),
                        j.at("rank_offset").get<std::uint32_t>()};
  });
}

std::string toJson(const FailureRecord& f) {
  return json{{"address", f.address}, {"failed_at_ms", f.failedAtMs}, {"lost_a_peer", f.lostAPeer}}
      .dump();
}

std::optional<FailureRecord> failureFromJson(const std::string& text) {
  return parsed<FailureRecord>(text, [](const json& j) {
    return FailureRecord{j.at("address").get<std::string>(),
                         j.at("failed_at_ms").get<std::int64_t>(), j.value("lost_a_peer", false)};
  });
}

std::string participantsToJson(const std::vector<NodeInfo>& participants) {
  json list = json::array();
  for (const auto& n : participants) list.push_back(nodeJson(n));
  return json{{"participants", list}}.dump();
}

std::vector<NodeInfo> participantsFromJson(const std::string& text) {
  return parsed<std::vector<NodeInfo>>(text,
                                       [](const json& j) {
                                         std::vector<NodeInfo> out;
                                         for (const auto& n : j.at("participants")) {
                                           out.push_back(nodeOf(n));
                                         }
                                         return out;
                                       })
      .value_or(std::vector<NodeInfo>{});
}

RoundState initialState(const protocol::JoinRequest& j, std::int64_t nowMs, std::int64_t jobLease) {
  const policy::Settings settings = policy::settingsOf(j);
  RoundState s;
  s.minNodes = settings.minNodes;
  s.maxNodes = settings.maxNodes;
  s.lastCallMs = settings.lastCallMs;
  s.maxRestarts = settings.maxRestarts;
  s.maxNodeFailures = settings.maxNodeFailures;
  s.nodeCooldownMs = settings.nodeCooldownMs;
  s.jobLease = jobLease;
  s.fixedNodes = settings.fixedNodes;
  s.formingSinceMs = nowMs;
  return s;
}

namespace {

std::vector<policy::Member> membersOf(const std::vector<NodeInfo>& nodes) {
  std::vector<policy::Member> out;
  out.reserve(nodes.size());
  for (const auto& n : nodes) out.push_back(memberOf(n));
  return out;
}

}  // namespace

RoundState startRound(const RoundState& state, const std::vector<NodeInfo>& participants,
                      const std::string& publishId) {
  RoundState next = state;
  next.phase = Phase::kRunning;
  ++next.round;
  next.publishId = publishId;
  const auto places = policy::placeRound(membersOf(participants), next.round, next.restarts);
  next.groupWorldSize = static_cast<std::uint32_t>(participants.size());
  next.worldSize = places.empty() ? 0 : places.front().worldSize;
  next.masterAddr = places.empty() ? "" : places.front().masterAddr;
  next.masterPort = places.empty() ? 0 : places.front().masterPort;
  next.endedReason.clear();
  return next;
}

std::vector<AssignRecord> assignments(const RoundState& running,
                                      const std::vector<NodeInfo>& participants) {
  std::vector<AssignRecord> out;
  for (const auto& place : policy::placeRound(membersOf(participants), running.round, 0)) {
    out.push_back({running.round, running.publishId, place.groupRank, place.rankOffset});
  }
  return out;
}

RoundState endRound(const RoundState& state, const std::string& reason, std::int64_t nowMs) {
  RoundState next = state;
  next.phase = Phase::kForming;
  next.endedReason = reason;
  next.formingSinceMs = nowMs;
  return next;
}

RoundState loseNodes(const RoundState& state, const std::map<std::string, LostNode>& lost,
                     const std::string& endReason, std::int64_t nowMs) {
  RoundState next = state;
  next.lost.insert(lost.begin(), lost.end());
  if (policy::cannotReachMinimum(next.settings(), next.lost.size())) {
    next.phase = Phase::kClosed;
    next.endedReason = endReason.empty() ? "a node of its fixed set was lost" : endReason;
    next.failedExitCode = 1;
    next.failureReport = policy::lostNodesReport(next.settings(), next.lost);
    return next;
  }
  if (state.phase == Phase::kRunning && !endReason.empty()) {
    return endRound(next, endReason, nowMs);
  }
  return next;
}

std::optional<protocol::Assignment> assignmentOf(const RoundState& s, const AssignRecord& record) {
  if (s.phase != Phase::kRunning || record.round != s.round || record.publishId != s.publishId) {
    return std::nullopt;
  }
  protocol::Assignment a;
  a.round = s.round;
  a.groupRank = record.groupRank;
  a.groupWorldSize = s.groupWorldSize;
  a.rankOffset = record.rankOffset;
  a.worldSize = s.worldSize;
  a.restarts = s.restarts;
  a.masterAddr = s.masterAddr;
  a.masterPort = s.masterPort;
  return a;
}

std::string leftValue(std::int64_t round, std::int64_t exitCode) {
  return fmt::format("{} {}", round, exitCode);
}

std::int64_t leftExitCode(const std::string& value) {
  const auto space = value.find(' ');
  if (space == std::string::npos) return 0;
  std::int64_t code = 0;
  const char* first = value.data() + space + 1;
  const char* last = value.data() + value.size();
  return std::from_chars(first, last, code).ec == std::errc() ? code : 0;
}

std::optional<std::string> lostReason(const std::map<std::string, std::int64_t>& left,
                                      const std::string& node) {
  const auto it = left.find(node);
  if (it == left.end()) return kLeaseLapsed;
  if (it->second == 0) return std::nullopt;
  return protocol::leftJobText(it->second);
}

}  // namespace ddprun::rendezvous::etcd
