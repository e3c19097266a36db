#include "etcd_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

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

// Requested node ranks first, then the order of first arrival.
bool before(const NodeInfo& a, const NodeInfo& b) {
  const auto rankA =
      a.requestedRank >= 0 ? a.requestedRank : std::numeric_limits<std::int64_t>::max();
  const auto rankB =
      b.requestedRank >= 0 ? b.requestedRank : std::numeric_limits<std::int64_t>::max();
  if (rankA != rankB) return rankA < rankB;
  return a.firstSeen != b.firstSeen ? a.firstSeen < b.firstSeen : a.id < b.id;
}

}  // namespace

std::string toJson(const NodeInfo& node) { return nodeJson(node).dump(); }

std::optional<NodeInfo> nodeFromJson(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) return std::nullopt;
  try {
    return nodeOf(j);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string toJson(const RoundState& s) {
  json participants = json::array();
  for (const auto& n : s.participants) participants.push_back(nodeJson(n));
  return json{{"min_nodes", s.minNodes},
              {"max_nodes", s.maxNodes},
              {"last_call_ms", s.lastCallMs},
              {"max_restarts", s.maxRestarts},
              {"round", s.round},
              {"phase", phaseName(s.phase)},
              {"forming_since_ms", s.formingSinceMs},
              {"restarts", s.restarts},
              {"participants", participants},
              {"expected", s.expected},
              {"ended_reason", s.endedReason},
              {"last_failure",
               {{"node", s.lastFailure.nodeId},
                {"round", s.lastFailure.round},
                {"exit_code", s.lastFailure.exitCode},
                {"failed_at_ms", s.lastFailure.failedAtMs},
                {"report", s.lastFailure.report}}},
              {"failed_exit_code", s.failedExitCode},
              {"failure_report", s.failureReport}}
      .dump();
}

std::optional<RoundState> stateFromJson(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    RoundState s;
    s.minNodes = j.at("min_nodes").get<std::uint32_t>();
    s.maxNodes = j.at("max_nodes").get<std::uint32_t>();
    s.lastCallMs = j.value("last_call_ms", 0u);
    s.maxRestarts = j.value("max_restarts", std::int64_t{0});
    s.round = j.value("round", std::int64_t{0});
    const std::string phase = j.value("phase", "forming");
    s.phase = phase == "running"  ? Phase::kRunning
              : phase == "closed" ? Phase::kClosed
                                  : Phase::kForming;
    s.formingSinceMs = j.value("forming_since_ms", std::int64_t{0});
    s.restarts = j.value("restarts", std::int64_t{0});
    for (const auto& n : j.value("participants", json::array()))
      s.participants.push_back(nodeOf(n));
    s.expected = j.value("expected", std::vector<std::string>{});
    s.endedReason = j.value("ended_reason", "");
    if (const auto f = j.find("last_failure"); f != j.end() && f->is_object()) {
      s.lastFailure.nodeId = f->value("node", "");
      s.lastFailure.round = f->value("round", std::int64_t{0});
      s.lastFailure.exitCode = f->value("exit_code", std::int64_t{0});
      s.lastFailure.failedAtMs = f->value("failed_at_ms", std::int64_t{0});
      s.lastFailure.report = f->value("report", "");
    }
    s.failedExitCode = j.value("failed_exit_code", std::int64_t{0});
    s.failureReport = j.value("failure_report", "");
    return s;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

bool apply(View& view, const Keys& keys, const std::string& key, const std::string* value,
           std::int64_t modRevision) {
  if (key.size() < keys.base.size() || key.compare(0, keys.base.size(), keys.base) != 0) {
    return false;
  }
  const std::string rest = key.substr(keys.base.size());
  const auto member = [&](std::string_view folder) -> std::optional<std::string> {
    if (rest.size() <= folder.size() || rest.compare(0, folder.size(), folder) != 0) {
      return std::nullopt;
    }
    return rest.substr(folder.size());
  };
  if (rest == "state") {
    if (modRevision <= view.stateSeen) return false;
    view.stateSeen = modRevision;
    view.state = value ? stateFromJson(*value) : std::nullopt;
    view.stateRevision = view.state ? modRevision : 0;
    return true;
  }
  if (auto id = member("alive/")) {
    if (value) {
      view.alive.insert(*id);
    } else {
      view.alive.erase(*id);
    }
  } else if (auto joining = member("joining/")) {
    auto node = value ? nodeFromJson(*value) : std::nullopt;
    if (node) {
      node->id = *joining;
      view.joining[*joining] = *node;
    } else {
      view.joining.erase(*joining);
    }
  } else if (auto left = member("left/")) {
    if (value) {
      view.left.insert(*left);
    } else {
      view.left.erase(*left);
    }
  }
  return false;
}

RoundState initialState(const protocol::JoinRequest& j, std::int64_t nowMs) {
  RoundState s;
  s.minNodes = std::max<std::uint32_t>(1, j.minNodes);
  s.maxNodes = std::max(s.minNodes, j.maxNodes);
  s.lastCallMs = j.lastCallMs;
  s.maxRestarts = std::max<std::int64_t>(0, j.maxRestarts);
  s.formingSinceMs = nowMs;
  return s;
}

std::optional<RoundState> completeIfReady(const View& view, std::int64_t nowMs,
                                          std::int64_t& wakeAtMs) {
  wakeAtMs = 0;
  if (!view.state || view.state->phase != Phase::kForming) return std::nullopt;
  const RoundState& s = *view.state;
  std::vector<NodeInfo> joined;
  for (const auto& [id, node] : view.joining) {
    if (view.alive.contains(id)) joined.push_back(node);
  }
  if (joined.size() < s.minNodes) return std::nullopt;
  bool ready = joined.size() >= s.maxNodes || s.lastCallMs == 0;
  if (!ready && !s.expected.empty()) {
    // Every node of the ended round that is still alive is back.
    ready = std::all_of(s.expected.begin(), s.expected.end(), [&](const std::string& id) {
      return !view.alive.contains(id) || std::any_of(joined.begin(), joined.end(),
                                                     [&](const NodeInfo& n) { return n.id == id; });
    });
  }
  if (!ready) {
    // The last call starts when MIN nodes are there (and not before the
    // round opened): the MIN-th arrival's time.
    std::vector<std::int64_t> times;
    for (const auto& n : joined) times.push_back(std::max(n.joinedAtMs, s.formingSinceMs));
    std::nth_element(times.begin(), times.begin() + (s.minNodes - 1), times.end());
    wakeAtMs = times[s.minNodes - 1] + s.lastCallMs;
    if (nowMs < wakeAtMs) return std::nullopt;
  }
  std::sort(joined.begin(), joined.end(), before);
  if (joined.size() > s.maxNodes) joined.resize(s.maxNodes);
  RoundState next = s;
  next.phase = Phase::kRunning;
  ++next.round;
  next.participants = std::move(joined);
  next.expected.clear();
  next.endedReason.clear();
  return next;
}

RoundState endRound(const RoundState& state, const std::string& reason, std::int64_t nowMs) {
  RoundState next = state;
  next.phase = Phase::kForming;
  next.expected.clear();
  for (const auto& n : state.participants) next.expected.push_back(n.id);
  next.participants.clear();
  next.endedReason = reason;
  next.formingSinceMs = nowMs;
  return next;
}

std::optional<protocol::Assignment> assignmentOf(const RoundState& s, const std::string& nodeId) {
  if (s.phase != Phase::kRunning || s.participants.empty()) return std::nullopt;
  protocol::Assignment a;
  a.round = s.round;
  a.groupWorldSize = static_cast<std::uint32_t>(s.participants.size());
  a.restarts = s.restarts;
  a.masterAddr = s.participants.front().address;
  a.masterPort = s.participants.front().masterPort;
  std::uint32_t offset = 0;
  bool found = false;
  for (std::uint32_t rank = 0; rank < s.participants.size(); ++rank) {
    const NodeInfo& n = s.participants[rank];
    if (n.id == nodeId) {
      a.groupRank = rank;
      a.rankOffset = offset;
      found = true;
    }
    offset += n.localWorldSize;
  }
  a.worldSize = offset;
  if (!found) return std::nullopt;
  return a;
}

protocol::RendezvousStatus statusOf(const View& view, bool details, std::int64_t nowMs) {
  protocol::RendezvousStatus st;
  if (!view.state) return st;
  const RoundState& s = *view.state;
  st.exists = true;
  st.round = s.round;
  st.running = s.phase == Phase::kRunning;
  st.minNodes = s.minNodes;
  st.maxNodes = s.maxNodes;
  for (const auto& [id, node] : view.joining) {
    if (view.alive.contains(id)) ++st.joined;
  }
  std::int64_t wakeAtMs = 0;
  completeIfReady(view, nowMs, wakeAtMs);
  if (wakeAtMs > 0) st.lastCallMs = std::max<std::int64_t>(0, wakeAtMs - nowMs);
  const auto missing = [&](const std::string& text) {
    ++st.missingCount;
    if (st.missing.size() < protocol::kMaxMissingShown) st.missing.push_back(text);
  };
  if (s.phase == Phase::kForming) {
    for (const auto& id : s.expected) {
      if (view.alive.contains(id) && !view.joining.contains(id)) missing("node " + id);
    }
  }
  if (!details) return st;
  st.closed = s.phase == Phase::kClosed;
  st.restarts = s.restarts;
  st.maxRestarts = s.maxRestarts;
  st.lastFailure = s.lastFailure;
  if (s.phase == Phase::kRunning) {
    for (std::size_t rank = 0; rank < s.participants.size(); ++rank) {
      const NodeInfo& n = s.participants[rank];
      st.members.push_back({n.id, n.address, static_cast<std::int64_t>(rank), n.localWorldSize});
    }
  }
  for (const auto& [id, node] : view.joining) {
    if (view.alive.contains(id)) st.members.push_back({id, node.address, -1, node.localWorldSize});
  }
  return st;
}

}  // namespace ddprun::rendezvous::etcd
