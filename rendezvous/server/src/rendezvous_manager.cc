#include "rendezvous_manager.h"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <limits>
#include <vector>

#include "ddprun/common/logging.h"
#include "ddprun/rendezvous/round_text.h"

namespace ddprun::rendezvous {

namespace {

// The policy's clock: the steady clock, in ms (the wake timer's too).
std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool isLoopback(const std::string& address) {
  boost::system::error_code ec;
  const auto parsed = boost::asio::ip::make_address(address, ec);
  return !ec && parsed.is_loopback();
}

}  // namespace

using protocol::Assignment;
using protocol::Event;
using protocol::EventType;
using protocol::Status;

struct RendezvousManager::Node {
  std::string id;
  Peer* peer = nullptr;
  std::int64_t requestedRank = -1;
  std::uint32_t localWorldSize = 1;
  std::string address;
  std::uint32_t masterPort = 0;
  std::uint64_t firstSeen = 0;
  std::uint32_t groupRank = 0;                         // in the running round
  std::uint32_t requestId = 0;                         // of its pending JOIN
  std::unique_ptr<boost::asio::steady_timer> timeout;  // of its pending JOIN
};

struct RendezvousManager::Rendezvous {
  explicit Rendezvous(boost::asio::any_io_executor executor) : wake(executor) {}

  std::string id;
  policy::Settings settings;  // fixed by the JOIN that created it
  std::int64_t round = 0;
  bool running = false;  // a round is complete and its workers run
  bool closed = false;   // the job failed: nobody may join again
  std::int64_t restarts = 0;
  // Nodes lost (not a LEAVE) since the last round formed (with a fixed set
  // of nodes: ever), by node id: named in the waiting nodes' progress and
  // timeout messages.
  std::map<std::string, policy::LostNode> lost;
  std::map<std::string, policy::HostRecord> hosts;      // by address
  std::vector<policy::Failure> roundFailures;           // the latest round's, not attributed yet
  std::set<std::string> roundHosts;                     // the latest round's hosts
  std::map<std::string, policy::NotBack> roundMembers;  // the latest round's nodes, by id
  std::int64_t failedExitCode = 0;
  std::string failureReport;
  protocol::FailureSummary lastFailure;      // the failure that ended the latest round
  std::int64_t failures = 0;                 // rounds ended by a worker failure
  std::string finishedNode;                  // a node of `finishedRound` whose workers all
  std::int64_t finishedRound = 0;            // finished (LEAVE 0): no restart after it
  std::map<std::string, Node> joining;       // waiting in JOIN
  std::map<std::string, Node> participants;  // of the running round
  std::set<std::string> expected;            // participants of the ended round
  std::map<std::string, std::uint64_t> firstSeen;
  std::uint64_t arrivals = 0;
  std::int64_t minReachedAtMs = -1;  // the policy's last call: when MIN joined
  boost::asio::steady_timer wake;    // at the policy's next deadline
  std::int64_t wakeAtMs = -1;
};

namespace {

template <typename Rendezvous>
protocol::JobFailure failureOf(const Rendezvous& r) {
  return {r.failedExitCode, r.failureReport};
}

template <typename Node>
policy::Member memberOf(const Node& node) {
  return {node.id,      node.requestedRank, node.localWorldSize,
          node.address, node.masterPort,    static_cast<std::int64_t>(node.firstSeen)};
}

}  // namespace

RendezvousManager::RendezvousManager(boost::asio::any_io_executor executor, StoreState& state)
    : executor_(std::move(executor)), state_(state) {}

void RendezvousManager::markFinishedIfEmpty(Rendezvous& r) {
  if (r.participants.empty() && r.joining.empty())
    state_.set(protocol::rendezvousFinishedKey(r.id), "1");
}

RendezvousManager::~RendezvousManager() = default;

RendezvousManager::Rendezvous* RendezvousManager::find(const std::string& id) {
  auto it = rendezvous_.find(id);
  return it == rendezvous_.end() ? nullptr : it->second.get();
}

RendezvousManager::Rendezvous& RendezvousManager::getOrCreate(const protocol::JoinRequest& j) {
  auto& slot = rendezvous_[j.rdzvId];
  if (!slot) {
    slot = std::make_unique<Rendezvous>(executor_);
    slot->id = j.rdzvId;
    slot->settings = policy::settingsOf(j);
    DDPRUN_INFO("Rendezvous '{}' opened for {} to {} nodes.", printable(j.rdzvId),
                slot->settings.minNodes, slot->settings.maxNodes);
  }
  return *slot;
}

void RendezvousManager::join(Peer& peer, std::uint32_t requestId,
                             const protocol::JoinRequest& request) {
  Rendezvous& r = getOrCreate(request);
  if (r.closed) {
    peer.answerClosed(requestId, failureOf(r));
    return;
  }
  if (const std::string mismatch = policy::settingsMismatch(r.id, r.settings, request);
      !mismatch.empty()) {
    peer.answerJoin(requestId, Status::kBadRequest, {}, mismatch);
    return;
  }
  if (request.nodeRank >= 0) {
    for (const auto* group : {&r.joining, &r.participants}) {
      for (const auto& [id, node] : *group) {
        if (id != request.nodeId && node.requestedRank == request.nodeRank) {
          peer.answerJoin(requestId, Status::kBadRequest, {},
                          policy::rankTaken(request.nodeRank, id));
          return;
        }
      }
    }
  }
  const std::string address = request.address.empty() ? peer.peerAddress() : request.address;
  if (policy::excluded(r.hosts, address, nowMs())) {
    peer.answerJoin(requestId, Status::kExcluded, {},
                    policy::refusalText(r.id, r.settings, request.nodeId, address,
                                        r.hosts.at(address), nowMs()));
    return;
  }
  // A node with a lost node's id or rank replaces it (a static node restarted).
  policy::releaseLost(r.lost, {request.nodeId, request.nodeRank, 1, address, 0, 0});
  const bool participant = r.participants.contains(request.nodeId);
  r.participants.erase(request.nodeId);  // rejoining after its round ended
  if (!r.firstSeen.contains(request.nodeId)) r.firstSeen[request.nodeId] = r.arrivals++;

  Node node;
  node.id = request.nodeId;
  node.peer = &peer;
  node.requestedRank = request.nodeRank;
  node.localWorldSize = std::max<std::uint32_t>(1, request.localWorldSize);
  node.address = address;
  node.masterPort = request.masterPort;
  node.firstSeen = r.firstSeen[request.nodeId];
  node.requestId = requestId;
  if (request.timeoutMs != protocol::kNoTimeout) {
    node.timeout = std::make_unique<boost::asio::steady_timer>(
        executor_, std::chrono::milliseconds(request.timeoutMs));
    node.timeout->async_wait(
        [this, id = r.id, nodeId = request.nodeId](boost::system::error_code ec) {
          if (ec) return;
          Rendezvous* rdzv = find(id);
          if (rdzv == nullptr) return;
          auto it = rdzv->joining.find(nodeId);
          if (it == rdzv->joining.end()) return;
          Peer* waiting = it->second.peer;
          const std::uint32_t pendingId = it->second.requestId;
          const protocol::RendezvousStatus st = status(id);
          waiting->answerJoin(pendingId, Status::kTimeout, {}, policy::joinTimeoutText(id, st));
          // It gives up: the others name it so, not as a node not back yet
          // (and a fixed set of nodes that cannot reach the minimum ends).
          nodeGone(*rdzv, nodeId, "it stopped waiting: its join timed out");
        });
  }
  byPeer_[&peer].insert({r.id, request.nodeId});
  r.joining[request.nodeId] = std::move(node);

  if (r.running) {
    // Scale up, or a participant back: the running round ends so the node
    // can be included; else (full) it waits for a slot.
    const std::string reason =
        policy::endOnJoin(r.settings, r.participants.size(), participant, request.nodeId);
    if (reason.empty()) return;
    endRound(r, reason, "");
  }
  tryComplete(r);
}

void RendezvousManager::tryComplete(Rendezvous& r) {
  if (r.running || r.closed) {
    schedule(r, -1);  // cooldowns only
    return;
  }
  if (r.joining.size() < r.settings.minNodes) {
    // Fewer than MIN wait, excluded hosts included: the policy would neither
    // form a round nor start the last call. Said here in O(1), so a large
    // job's JOINs cost O(N) in all, not O(N^2) copies of the waiting nodes.
    r.minReachedAtMs = -1;
    schedule(r, -1);  // cooldowns only
    return;
  }
  policy::FormInput in;
  in.settings = r.settings;
  in.round = r.round;
  in.hosts = r.hosts;
  for (const auto& [id, node] : r.joining) in.joining.push_back(memberOf(node));
  in.expected = r.expected.size();
  for (const auto& id : r.expected) in.expectedBack += r.joining.contains(id) ? 1 : 0;
  in.roundHosts = r.roundHosts;
  in.failures = r.roundFailures;
  in.minReachedAtMs = r.minReachedAtMs;
  const policy::Formation f = policy::formRound(in, nowMs());
  r.minReachedAtMs = f.minReachedAtMs;
  if (f.attributed) {
    // The ended round's failure went to the host that failed first; a host
    // that keeps failing is left out of the round being formed.
    r.hosts = f.hosts;
    r.roundFailures.clear();
    if (f.attribution.exclusion) exclude(r, *f.attribution.exclusion);
    if (f.attribution.stays) {
      DDPRUN_WARN("{}.", policy::staysText(r.id, f.attribution.blamed, f.attribution.streak,
                                           r.settings.minNodes));
    }
  }
  if (f.form) complete(r, f.participants);
  schedule(r, f.form ? -1 : f.wakeAtMs);
}

void RendezvousManager::schedule(Rendezvous& r, std::int64_t atMs) {
  const std::int64_t cooldown = policy::nextCooldownEnd(r.hosts);
  if (atMs < 0 || (cooldown >= 0 && cooldown < atMs)) atMs = cooldown;
  if (atMs == r.wakeAtMs) return;
  r.wakeAtMs = atMs;
  if (atMs < 0) {
    r.wake.cancel();
    return;
  }
  r.wake.expires_at(boost::asio::steady_timer::time_point(std::chrono::milliseconds(atMs)));
  r.wake.async_wait([this, id = r.id](boost::system::error_code ec) {
    if (!ec) onWake(id);
  });
}

void RendezvousManager::onWake(const std::string& rdzvId) {
  Rendezvous* r = find(rdzvId);
  if (r == nullptr) return;
  r->wakeAtMs = -1;
  for (const auto& address : policy::readmit(r->hosts, nowMs())) {
    Event readmitted;
    readmitted.type = EventType::kNodeReadmitted;
    readmitted.rdzvId = r->id;
    readmitted.round = r->round;
    readmitted.message = policy::readmittedText(r->id, address);
    DDPRUN_INFO("{}.", readmitted.message);
    pushToAll(*r, readmitted);
  }
  tryComplete(*r);  // the last call may have ended; arms the next wake
}

void RendezvousManager::complete(Rendezvous& r, const std::vector<policy::Member>& order) {
  ++r.round;
  const std::vector<Assignment> places = policy::placeRound(order, r.round, r.restarts);
  const Assignment& a = places.front();
  const std::uint32_t worldSize = a.worldSize;
  // Workers reach group rank 0 at its node's address: a loopback one (an
  // endpoint named by a host name that /etc/hosts maps to 127.0.1.1 on that
  // machine) reaches nobody on another host.
  const auto onAnotherHost = [](const policy::Member& node) { return !isLoopback(node.address); };
  if (std::any_of(order.begin(), order.end(), onAnotherHost)) {
    for (const auto& node : order) {
      if (!isLoopback(node.address)) continue;
      DDPRUN_WARN(
          "Round {} of rendezvous '{}': node {} is known by the loopback address {}, which the "
          "nodes on other hosts cannot reach (as their workers' MASTER_ADDR when it is group "
          "rank 0); give that node --local_addr.",
          r.round, printable(r.id), printable(node.id), printable(node.address));
    }
  }
  r.roundHosts.clear();
  r.roundMembers.clear();
  r.roundFailures.clear();
  std::vector<std::pair<Peer*, std::pair<std::uint32_t, Assignment>>> answers;
  for (std::uint32_t rank = 0; rank < order.size(); ++rank) {
    Node& node = r.joining.at(order[rank].id);
    r.roundHosts.insert(node.address);
    r.roundMembers[node.id] = {order[rank], rank};
    node.groupRank = rank;
    answers.push_back({node.peer, {node.requestId, places[rank]}});
    if (node.timeout) node.timeout->cancel();
    node.timeout.reset();
    const std::string id = node.id;
    r.participants[id] = std::move(node);
    r.joining.erase(id);
  }
  r.running = true;
  r.expected.clear();
  // The round formed without them; with a fixed set of nodes they still
  // count against the minimum (peerLost).
  if (r.settings.fixedNodes == 0) r.lost.clear();
  DDPRUN_INFO("Rendezvous '{}' round {} is complete: {} nodes, {} workers, master {}:{}.",
              printable(r.id), r.round, a.groupWorldSize, worldSize, printable(a.masterAddr),
              a.masterPort);
  for (auto& [peer, answer] : answers)
    peer->answerJoin(answer.first, Status::kOk, answer.second, "");
}
void RendezvousManager::endRound(Rendezvous& r, const std::string& reason,
                                 const std::string& exceptNode) {
  if (!r.running) return;
  r.running = false;
  r.expected.clear();
  Event event;
  event.type = EventType::kRoundEnded;
  event.rdzvId = r.id;
  event.round = r.round;
  event.message = reason;
  std::vector<Peer*> told;
  for (auto& [id, node] : r.participants) {
    r.expected.insert(id);
    if (id != exceptNode) told.push_back(node.peer);
  }
  push(told, event);
  DDPRUN_INFO("Rendezvous '{}' round {} ended: {}.", printable(r.id), r.round,
              printable(reason, 512));
}

void RendezvousManager::failJob(Rendezvous& r, std::int64_t exitCode, const std::string& report,
                                const std::string& exceptNode) {
  r.closed = true;
  r.running = false;
  r.failedExitCode = exitCode;
  r.failureReport = report;
  Event event;
  event.type = EventType::kJobFailed;
  event.rdzvId = r.id;
  event.round = r.round;
  event.exitCode = exitCode;
  event.message = report;
  std::vector<Peer*> told;
  for (auto& [id, node] : r.participants) {
    if (id != exceptNode) told.push_back(node.peer);
  }
  push(told, event);
  for (auto [peer, requestId] : dropJoinersIf(r, [](const Node&) { return true; })) {
    peer->answerClosed(requestId, failureOf(r));
  }
  DDPRUN_WARN(
      "Rendezvous '{}' is closed: the job failed with exit code {} and no restarts "
      "left.",
      printable(r.id), exitCode);
}

std::vector<std::pair<RendezvousManager::Peer*, std::uint32_t>> RendezvousManager::dropJoinersIf(
    Rendezvous& r, const std::function<bool(const Node&)>& which) {
  std::vector<std::pair<Peer*, std::uint32_t>> dropped;
  std::vector<std::string> ids;
  for (const auto& [id, node] : r.joining) {
    if (which(node)) {
      dropped.emplace_back(node.peer, node.requestId);
      ids.push_back(id);
    }
  }
  for (const auto& id : ids) dropJoiner(r, id);
  return dropped;
}

void RendezvousManager::dropJoiner(Rendezvous& r, const std::string& nodeId) {
  auto it = r.joining.find(nodeId);
  if (it == r.joining.end()) return;
  if (it->second.timeout) it->second.timeout->cancel();
  r.joining.erase(it);
}

RendezvousManager::Rendezvous* RendezvousManager::reportedBy(Peer& peer,
                                                             const protocol::NodeReport& report,
                                                             Status& status, std::string& message) {
  Rendezvous* r = find(report.rdzvId);
  if (r == nullptr) {
    status = Status::kBadRequest;
    message = fmt::format("there is no rendezvous '{}'", printable(report.rdzvId));
    return nullptr;
  }
  const auto it = byPeer_.find(&peer);
  if (it == byPeer_.end() || !it->second.contains({report.rdzvId, report.nodeId})) {
    status = Status::kAuthFailed;
    message = fmt::format(
        "this connection has not joined rendezvous '{}' as node {}; a node may only leave or "
        "report for itself",
        printable(report.rdzvId), printable(report.nodeId));
    return nullptr;
  }
  return r;
}

Status RendezvousManager::leave(Peer& peer, const protocol::NodeReport& report,
                                std::string& message) {
  Status status = Status::kOk;
  Rendezvous* r = reportedBy(peer, report, status, message);
  if (r == nullptr) return status;
  auto byPeer = byPeer_.find(&peer);
  if (byPeer != byPeer_.end()) byPeer->second.erase({report.rdzvId, report.nodeId});
  if (report.exitCode != 0) {
    // It leaves while the others may still train (a signal, its own end):
    // they are told, and it is named among the nodes they wait for.
    DDPRUN_INFO("Node {} left rendezvous '{}' with exit code {}.", printable(report.nodeId),
                printable(report.rdzvId), report.exitCode);
    nodeGone(*r, report.nodeId, protocol::leftJobText(report.exitCode));
    r->expected.erase(report.nodeId);
    markFinishedIfEmpty(*r);
    return Status::kOk;
  }
  const bool ofTheRound = report.round == r->round && r->participants.contains(report.nodeId);
  r->participants.erase(report.nodeId);
  dropJoiner(*r, report.nodeId);
  r->expected.erase(report.nodeId);
  DDPRUN_INFO("Node {} left rendezvous '{}'.", printable(report.nodeId), printable(report.rdzvId));
  if (ofTheRound && !r->closed) {
    // Its workers are done: the job is ending. A failure of this round
    // (before or after) cannot be restarted, as this node will not rejoin.
    r->finishedNode = report.nodeId;
    r->finishedRound = r->round;
    if (!r->running && r->lastFailure.round == r->round) {
      failJob(*r, r->lastFailure.exitCode,
              r->lastFailure.report + policy::finishedNodeText(report.nodeId), "");
    }
  }
  markFinishedIfEmpty(*r);
  tryComplete(*r);  // the ended round's others may all be back now
  return Status::kOk;
}

Status RendezvousManager::reportFailure(Peer& peer, const protocol::NodeReport& report,
                                        protocol::RestartDecision& decision, std::string& message) {
  Status status = Status::kOk;
  Rendezvous* r = reportedBy(peer, report, status, message);
  if (r == nullptr) return status;
  if (const auto node = r->participants.find(report.nodeId);
      node != r->participants.end() && report.round == r->round) {
    r->roundFailures.push_back(
        {report.nodeId, node->second.address, report.failedAtMs, report.lostAPeer});
  }
  if (report.round == r->round && r->running && !r->closed &&
      r->participants.contains(report.nodeId)) {
    r->lastFailure = {report.nodeId, report.round, report.exitCode, report.failedAtMs,
                      report.report};
    ++r->failures;
    const bool ending = r->finishedRound == r->round;
    const policy::FailureOutcome out =
        policy::spendRestart(r->settings, r->restarts, report.nodeId, report.giveUp || ending);
    r->restarts = out.restarts;
    if (out.restartAllowed) {
      endRound(*r, out.endReason, report.nodeId);
    } else {
      failJob(*r, report.exitCode,
              ending ? report.report + policy::finishedNodeText(r->finishedNode) : report.report,
              report.nodeId);
    }
  }
  // A failure in a round that already ended (another node reported first)
  // spends nothing: the decision taken for that round stands.
  decision = {r->restarts, !r->closed};
  return Status::kOk;
}

void RendezvousManager::exclude(Rendezvous& r, const policy::Exclusion& exclusion) {
  const std::string reason = policy::exclusionText(r.id, r.settings, exclusion);
  DDPRUN_WARN("{}.", reason);
  Event event;
  event.type = EventType::kNodeExcluded;
  event.rdzvId = r.id;
  event.round = r.round;
  event.message = reason;
  pushToAll(r, event);
  // A JOIN of that host already waiting is refused now.
  const auto fromHost = [&exclusion](const Node& node) {
    return node.address == exclusion.address;
  };
  for (auto [peer, requestId] : dropJoinersIf(r, fromHost)) {
    peer->answerJoin(requestId, Status::kExcluded, {}, reason);
  }
}

void RendezvousManager::pushToAll(Rendezvous& r, const Event& event) {
  std::vector<Peer*> told;
  for (auto* group : {&r.participants, &r.joining}) {
    for (auto& [id, node] : *group) told.push_back(node.peer);
  }
  push(told, event);
}

void RendezvousManager::push(const std::vector<Peer*>& peers, const Event& event) {
  // Never while walking the rendezvous' maps (the Peer contract: no call
  // back into this class inside a push; this keeps them safe if one did).
  for (Peer* peer : peers) peer->pushEvent(event);
}

protocol::RendezvousStatus RendezvousManager::status(const std::string& rdzvId,
                                                     bool details) const {
  protocol::RendezvousStatus st;
  const auto it = rendezvous_.find(rdzvId);
  if (it == rendezvous_.end()) return st;
  const Rendezvous& r = *it->second;
  st.exists = true;
  st.round = r.round;
  st.running = r.running;
  st.joined = static_cast<std::uint32_t>(r.joining.size());
  st.minNodes = r.settings.minNodes;
  st.maxNodes = r.settings.maxNodes;
  if (!r.running && r.minReachedAtMs >= 0 && r.settings.lastCallMs > 0) {
    st.lastCallMs = std::max<std::int64_t>(0, r.minReachedAtMs + r.settings.lastCallMs - nowMs());
  }
  describeMissing(r, st);
  if (details) describe(r, st);
  return st;
}

std::vector<RendezvousManager::Summary> RendezvousManager::summaries() const {
  std::vector<Summary> out;
  for (const auto& [id, r] : rendezvous_) {
    out.push_back({id, r->round, r->running, r->closed, r->participants.size(), r->joining.size(),
                   r->restarts, r->settings.maxRestarts, r->failures});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

void RendezvousManager::describe(const Rendezvous& r, protocol::RendezvousStatus& st) {
  st.closed = r.closed;
  st.restarts = r.restarts;
  st.maxRestarts = r.settings.maxRestarts;
  st.lastFailure = r.lastFailure;
  if (r.running) {
    for (const auto& [id, node] : r.participants) {
      st.members.push_back({id, node.address, node.groupRank, node.localWorldSize});
    }
    std::sort(st.members.begin(), st.members.end(),
              [](const auto& a, const auto& b) { return a.groupRank < b.groupRank; });
  }
  for (const auto& [id, node] : r.joining) {
    st.members.push_back({id, node.address, -1, node.localWorldSize});
  }
}

void RendezvousManager::describeMissing(const Rendezvous& r, protocol::RendezvousStatus& st) {
  std::vector<policy::NotBack> notBack;  // the ended round's nodes still there
  for (const auto& id : r.expected) {
    if (const auto m = r.roundMembers.find(id); m != r.roundMembers.end()) {
      policy::NotBack node = m->second;
      // The node rank it asks for now, if it has joined since.
      if (const auto p = r.participants.find(id); p != r.participants.end()) {
        node.member.requestedRank = p->second.requestedRank;
      }
      notBack.push_back(node);
    }
  }
  std::vector<policy::Member> joining;
  for (const auto& [id, node] : r.joining) joining.push_back(memberOf(node));
  policy::describeMissing(r.settings, r.lost, notBack, joining, st);
}

void RendezvousManager::peerLost(Peer& peer, const std::string& reason) {
  auto it = byPeer_.find(&peer);
  if (it == byPeer_.end()) return;
  const auto memberships = std::move(it->second);
  byPeer_.erase(it);
  for (const auto& [rdzvId, nodeId] : memberships) {
    Rendezvous* r = find(rdzvId);
    if (r == nullptr) continue;
    nodeGone(*r, nodeId, reason);
  }
}

void RendezvousManager::nodeGone(Rendezvous& r, const std::string& nodeId,
                                 const std::string& reason) {
  const Node* node = nullptr;
  if (const auto p = r.participants.find(nodeId); p != r.participants.end()) node = &p->second;
  if (const auto j = r.joining.find(nodeId); j != r.joining.end()) node = &j->second;
  const bool member = node != nullptr;
  if (member && !r.closed) r.lost[nodeId] = {node->address, node->requestedRank, reason};
  dropJoiner(r, nodeId);
  const bool wasParticipant = r.participants.erase(nodeId) > 0;
  if (wasParticipant) r.expected.erase(nodeId);
  if (member && !r.closed && policy::cannotReachMinimum(r.settings, r.lost.size())) {
    const std::string report = policy::lostNodesReport(r.settings, r.lost);
    DDPRUN_WARN("Rendezvous '{}': {}", printable(r.id), report.substr(0, report.size() - 1));
    failJob(r, 1, report, "");
  } else if (wasParticipant && r.running) {
    endRound(r, policy::lostText(nodeId, reason), "");
    r.expected.erase(nodeId);
  }
  markFinishedIfEmpty(r);  // nobody left: a host draining may go
  tryComplete(r);
}

}  // namespace ddprun::rendezvous
