#include "rendezvous_manager.h"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <limits>
#include <vector>

#include "ddprun/common/logging.h"

namespace ddprun::rendezvous {

namespace {

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

// One host (a node's address) of an elastic job: its failures in a row and
// whether it is left out.
struct RendezvousManager::Host {
  int streak = 0;               // its rounds in a row that it failed first in
  std::int64_t lastRound = -1;  // the last round it took part in
  std::unique_ptr<boost::asio::steady_timer> cooldown;  // set while excluded
};

struct RendezvousManager::LostNode {
  std::string address;
  std::int64_t requestedRank = -1;
  std::string reason;
};

struct RendezvousManager::Rendezvous {
  explicit Rendezvous(boost::asio::any_io_executor executor) : lastCall(executor) {}

  std::string id;
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;
  std::int64_t maxRestarts = 0;  // fixed by the JOIN that created it
  std::int64_t round = 0;
  bool running = false;  // a round is complete and its workers run
  bool closed = false;   // the job failed: nobody may join again
  std::int64_t restarts = 0;
  std::uint32_t maxNodeFailures = 0;  // fixed by the JOIN that created it; 0: never exclude
  std::uint32_t nodeCooldownMs = 0;
  // The nodes that can ever take part (a Slurm step's); 0: unbounded. Fixed
  // by the JOIN that created it.
  std::uint32_t fixedNodes = 0;
  // Nodes whose connection was lost (not a LEAVE) since the last round
  // formed (with fixedNodes: ever), by node id: named in the waiting nodes'
  // progress and timeout messages.
  std::map<std::string, LostNode> lost;
  std::map<std::string, Host> hosts;  // by address
  // The current round's failure reports: address -> (earliest failure, node).
  std::map<std::string, std::pair<std::int64_t, std::string>> roundFailures;
  std::int64_t failedExitCode = 0;
  std::string failureReport;
  protocol::FailureSummary lastFailure;      // the failure that ended the latest round
  std::int64_t failures = 0;                 // rounds ended by a worker failure
  std::map<std::string, Node> joining;       // waiting in JOIN
  std::map<std::string, Node> participants;  // of the running round
  std::set<std::string> expected;            // participants of the ended round
  std::map<std::string, std::uint64_t> firstSeen;
  std::uint64_t arrivals = 0;
  boost::asio::steady_timer lastCall;
  bool lastCallArmed = false;
};

namespace {

template <typename Rendezvous>
protocol::JobFailure failureOf(const Rendezvous& r) {
  return {r.failedExitCode, r.failureReport};
}

// "node node2:4121:ab12cd at 10.0.0.2, node rank 1, lost (connection
// closed)" (the etcd backend's words too).
template <typename LostNode>
std::string describeLost(const std::string& id, const LostNode& node) {
  return protocol::lostNodeText(id, node.address, node.requestedRank, node.reason);
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
    slot->minNodes = std::max<std::uint32_t>(1, j.minNodes);
    slot->maxNodes = std::max(slot->minNodes, j.maxNodes);
    slot->lastCallMs = j.lastCallMs;
    slot->maxRestarts = std::max<std::int64_t>(0, j.maxRestarts);
    slot->maxNodeFailures = j.maxNodeFailures;
    slot->nodeCooldownMs = j.nodeCooldownMs;
    slot->fixedNodes = j.fixedNodes;
    DDPRUN_INFO("Rendezvous '{}' opened for {} to {} nodes.", printable(j.rdzvId), slot->minNodes,
                slot->maxNodes);
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
  if (request.minNodes != r.minNodes || request.maxNodes != r.maxNodes) {
    peer.answerJoin(requestId, Status::kBadRequest, {},
                    fmt::format("rendezvous '{}' is for {}:{} nodes but this node asked for "
                                "{}:{}; give every node the same --nnodes",
                                r.id, r.minNodes, r.maxNodes, request.minNodes, request.maxNodes));
    return;
  }
  if (std::max<std::int64_t>(0, request.maxRestarts) != r.maxRestarts) {
    peer.answerJoin(requestId, Status::kBadRequest, {},
                    fmt::format("rendezvous '{}' has a budget of {} restarts but this node asked "
                                "for {}; give every node the same --max_restarts",
                                printable(r.id), r.maxRestarts, request.maxRestarts));
    return;
  }
  if (request.nodeRank >= 0) {
    for (const auto* group : {&r.joining, &r.participants}) {
      for (const auto& [id, node] : *group) {
        if (id != request.nodeId && node.requestedRank == request.nodeRank) {
          peer.answerJoin(requestId, Status::kBadRequest, {},
                          fmt::format("node rank {} is already taken by node {}; give every "
                                      "node its own --node_rank",
                                      request.nodeRank, id));
          return;
        }
      }
    }
  }
  const std::string address = request.address.empty() ? peer.peerAddress() : request.address;
  if (const auto host = r.hosts.find(address); host != r.hosts.end() && host->second.cooldown) {
    peer.answerJoin(requestId, Status::kExcluded, {},
                    fmt::format("node {} at {} is excluded from rendezvous '{}' for {} more s: its "
                                "workers failed first in {} rounds in a row",
                                printable(request.nodeId), printable(address), printable(r.id),
                                std::chrono::duration_cast<std::chrono::seconds>(
                                    host->second.cooldown->expiry() -
                                    boost::asio::steady_timer::clock_type::now())
                                    .count(),
                                r.maxNodeFailures));
    return;
  }
  if (request.nodeRank >= 0) {
    // A node with a lost node's rank replaces it (a static node restarted).
    std::erase_if(
        r.lost, [&](const auto& entry) { return entry.second.requestedRank == request.nodeRank; });
  }
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
    node.timeout->async_wait([this, id = r.id,
                              nodeId = request.nodeId](boost::system::error_code ec) {
      if (ec) return;
      Rendezvous* rdzv = find(id);
      if (rdzv == nullptr) return;
      auto it = rdzv->joining.find(nodeId);
      if (it == rdzv->joining.end()) return;
      Peer* waiting = it->second.peer;
      const std::uint32_t pendingId = it->second.requestId;
      const protocol::RendezvousStatus st = status(id);
      dropJoiner(*rdzv, nodeId);
      waiting->answerJoin(pendingId, Status::kTimeout, {},
                          fmt::format("rendezvous '{}' did not complete: {} of {}{} nodes joined{}",
                                      id, st.joined, st.minNodes == st.maxNodes ? "" : "at least ",
                                      st.minNodes, protocol::missingNodesText(st)));
    });
  }
  byPeer_[&peer].insert({r.id, request.nodeId});
  r.joining[request.nodeId] = std::move(node);

  if (r.running) {
    if (r.participants.size() < r.maxNodes) {
      // Scale up: the running round ends so the new node can be included.
      endRound(r, fmt::format("node {} asked to join", request.nodeId), "");
    } else {
      return;  // full: it waits for a slot
    }
  }
  tryComplete(r);
}

void RendezvousManager::tryComplete(Rendezvous& r) {
  if (r.running || r.closed) return;
  const std::size_t joined = r.joining.size();
  if (joined >= r.maxNodes) {
    complete(r);
    return;
  }
  if (joined < r.minNodes) return;
  const bool allBack = !r.expected.empty() &&
                       std::all_of(r.expected.begin(), r.expected.end(),
                                   [&](const std::string& id) { return r.joining.contains(id); });
  if (allBack || r.lastCallMs == 0) {
    complete(r);
    return;
  }
  if (!r.lastCallArmed) {
    r.lastCallArmed = true;
    r.lastCall.expires_after(std::chrono::milliseconds(r.lastCallMs));
    r.lastCall.async_wait([this, id = r.id](boost::system::error_code ec) {
      if (ec) return;
      Rendezvous* rdzv = find(id);
      if (rdzv == nullptr) return;
      rdzv->lastCallArmed = false;
      if (!rdzv->running && rdzv->joining.size() >= rdzv->minNodes) complete(*rdzv);
    });
  }
}

void RendezvousManager::complete(Rendezvous& r) {
  // The ended round's failure goes to the host that failed first; a host
  // that keeps failing may be left out of the round being formed.
  if (attributeFailures(r) && r.joining.size() < r.minNodes) return;  // wait for more
  r.lastCall.cancel();
  r.lastCallArmed = false;
  std::vector<Node*> order;
  for (auto& [id, node] : r.joining) order.push_back(&node);
  // Requested node ranks first, then the order of first arrival.
  std::sort(order.begin(), order.end(), [](const Node* a, const Node* b) {
    const auto rankA =
        a->requestedRank >= 0 ? a->requestedRank : std::numeric_limits<std::int64_t>::max();
    const auto rankB =
        b->requestedRank >= 0 ? b->requestedRank : std::numeric_limits<std::int64_t>::max();
    return rankA != rankB ? rankA < rankB : a->firstSeen < b->firstSeen;
  });
  if (order.size() > r.maxNodes) order.resize(r.maxNodes);
  ++r.round;
  std::uint32_t worldSize = 0;
  for (const Node* node : order) worldSize += node->localWorldSize;
  Assignment a;
  a.round = r.round;
  a.groupWorldSize = static_cast<std::uint32_t>(order.size());
  a.worldSize = worldSize;
  a.restarts = r.restarts;
  a.masterAddr = order.front()->address;
  a.masterPort = order.front()->masterPort;
  // Workers reach group rank 0 at its node's address: a loopback one (an
  // endpoint named by a host name that /etc/hosts maps to 127.0.1.1 on that
  // machine) reaches nobody on another host.
  const auto onAnotherHost = [](const Node* node) { return !isLoopback(node->address); };
  if (std::any_of(order.begin(), order.end(), onAnotherHost)) {
    for (const Node* node : order) {
      if (!isLoopback(node->address)) continue;
      DDPRUN_WARN(
          "Round {} of rendezvous '{}': node {} is known by the loopback address {}, which the "
          "nodes on other hosts cannot reach (as their workers' MASTER_ADDR when it is group "
          "rank 0); give that node --local_addr.",
          r.round, printable(r.id), printable(node->id), printable(node->address));
    }
  }
  std::uint32_t offset = 0;
  std::vector<std::pair<Peer*, std::pair<std::uint32_t, Assignment>>> answers;
  for (std::uint32_t rank = 0; rank < order.size(); ++rank) {
    Node& node = *order[rank];
    r.hosts[node.address].lastRound = r.round;
    a.groupRank = rank;
    a.rankOffset = offset;
    node.groupRank = rank;
    offset += node.localWorldSize;
    answers.push_back({node.peer, {node.requestId, a}});
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
  if (r.fixedNodes == 0) r.lost.clear();
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
  for (auto& [id, node] : r.participants) {
    r.expected.insert(id);
    if (id != exceptNode) node.peer->pushEvent(event);
  }
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
  for (auto& [id, node] : r.participants) {
    if (id != exceptNode) node.peer->pushEvent(event);
  }
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
  r->participants.erase(report.nodeId);
  dropJoiner(*r, report.nodeId);
  r->expected.erase(report.nodeId);
  auto byPeer = byPeer_.find(&peer);
  if (byPeer != byPeer_.end()) byPeer->second.erase({report.rdzvId, report.nodeId});
  DDPRUN_INFO("Node {} left rendezvous '{}'.", printable(report.nodeId), printable(report.rdzvId));
  markFinishedIfEmpty(*r);
  return Status::kOk;
}

Status RendezvousManager::reportFailure(Peer& peer, const protocol::NodeReport& report,
                                        protocol::RestartDecision& decision, std::string& message) {
  Status status = Status::kOk;
  Rendezvous* r = reportedBy(peer, report, status, message);
  if (r == nullptr) return status;
  if (const auto node = r->participants.find(report.nodeId);
      node != r->participants.end() && report.round == r->round) {
    auto [it, added] =
        r->roundFailures.try_emplace(node->second.address, report.failedAtMs, report.nodeId);
    if (!added && report.failedAtMs < it->second.first) {
      it->second = {report.failedAtMs, report.nodeId};
    }
  }
  if (report.round == r->round && r->running && !r->closed &&
      r->participants.contains(report.nodeId)) {
    r->lastFailure = {report.nodeId, report.round, report.exitCode, report.failedAtMs,
                      report.report};
    ++r->failures;
    if (r->restarts < r->maxRestarts) {
      ++r->restarts;
      endRound(*r,
               fmt::format("a worker on node {} failed (restart {} of {})", report.nodeId,
                           r->restarts, r->maxRestarts),
               report.nodeId);
    } else {
      failJob(*r, report.exitCode, report.report, report.nodeId);
    }
  }
  // A failure in a round that already ended (another node reported first)
  // spends nothing: the decision taken for that round stands.
  decision = {r->restarts, !r->closed};
  return Status::kOk;
}

bool RendezvousManager::attributeFailures(Rendezvous& r) {
  if (r.roundFailures.empty()) return false;  // ended by a membership change
  // The earliest failure (ties: the lower address); the others' failures
  // followed from it (a peer's collective broke).
  auto blamed = r.roundFailures.begin();
  for (auto it = r.roundFailures.begin(); it != r.roundFailures.end(); ++it) {
    if (it->second.first < blamed->second.first) blamed = it;
  }
  const std::string address = blamed->first;
  const std::string nodeId = blamed->second.second;
  r.roundFailures.clear();
  // Only the ended round's hosts: a host's streak counts its own rounds.
  for (auto& [hostAddress, host] : r.hosts) {
    if (host.lastRound == r.round) host.streak = hostAddress == address ? host.streak + 1 : 0;
  }
  const Host& host = r.hosts[address];
  const bool elastic = r.minNodes < r.maxNodes;
  if (!elastic || r.maxNodeFailures == 0 || host.cooldown ||
      static_cast<std::uint32_t>(host.streak) < r.maxNodeFailures) {
    return false;
  }
  std::size_t others = 0;
  for (const auto& [id, node] : r.joining) others += node.address != address ? 1 : 0;
  if (others < r.minNodes) {
    DDPRUN_WARN(
        "Rendezvous '{}': {} failed first in {} rounds in a row but stays: without it fewer than "
        "{} nodes are waiting.",
        printable(r.id), printable(address), host.streak, r.minNodes);
    return false;
  }
  exclude(r, address, nodeId);
  return true;
}

void RendezvousManager::exclude(Rendezvous& r, const std::string& address,
                                const std::string& nodeId) {
  Host& host = r.hosts[address];
  const int streak = host.streak;
  host.streak = 0;
  host.cooldown = std::make_unique<boost::asio::steady_timer>(
      executor_, std::chrono::milliseconds(r.nodeCooldownMs));
  const std::string reason = fmt::format(
      "node {} at {} is excluded from rendezvous '{}' for {:g} s: its workers failed first in {} "
      "rounds in a row (rdzv_conf max_node_failures={})",
      printable(nodeId), printable(address), printable(r.id), r.nodeCooldownMs / 1000.0, streak,
      r.maxNodeFailures);
  DDPRUN_WARN("{}.", reason);
  Event event;
  event.type = EventType::kNodeExcluded;
  event.rdzvId = r.id;
  event.round = r.round;
  event.message = reason;
  pushToAll(r, event);
  // A JOIN of that host already waiting is refused now.
  const auto fromHost = [&address](const Node& node) { return node.address == address; };
  for (auto [peer, requestId] : dropJoinersIf(r, fromHost)) {
    peer->answerJoin(requestId, Status::kExcluded, {}, reason);
  }
  host.cooldown->async_wait([this, id = r.id, address](boost::system::error_code ec) {
    if (ec) return;
    Rendezvous* rdzv = find(id);
    if (rdzv == nullptr) return;
    rdzv->hosts[address].cooldown.reset();
    Event readmitted;
    readmitted.type = EventType::kNodeReadmitted;
    readmitted.rdzvId = id;
    readmitted.round = rdzv->round;
    readmitted.message =
        fmt::format("the cooldown of {} in rendezvous '{}' ended: it may join again",
                    printable(address), printable(id));
    DDPRUN_INFO("{}.", readmitted.message);
    pushToAll(*rdzv, readmitted);
  });
}

void RendezvousManager::pushToAll(Rendezvous& r, const Event& event) {
  for (auto* group : {&r.participants, &r.joining}) {
    for (auto& [id, node] : *group) node.peer->pushEvent(event);
  }
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
  st.minNodes = r.minNodes;
  st.maxNodes = r.maxNodes;
  if (r.lastCallArmed) {
    st.lastCallMs = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(
               r.lastCall.expiry() - boost::asio::steady_timer::clock_type::now())
               .count());
  }
  describeMissing(r, st);
  if (details) describe(r, st);
  return st;
}

std::vector<RendezvousManager::Summary> RendezvousManager::summaries() const {
  std::vector<Summary> out;
  for (const auto& [id, r] : rendezvous_) {
    out.push_back({id, r->round, r->running, r->closed, r->participants.size(), r->joining.size(),
                   r->restarts, r->maxRestarts, r->failures});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

void RendezvousManager::describe(const Rendezvous& r, protocol::RendezvousStatus& st) {
  st.closed = r.closed;
  st.restarts = r.restarts;
  st.maxRestarts = r.maxRestarts;
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
  std::set<std::int64_t> named;  // node ranks already described
  const auto add = [&st](std::string text) {
    ++st.missingCount;
    if (st.missing.size() < protocol::kMaxMissingShown) st.missing.push_back(std::move(text));
  };
  // The nodes that were lost first: they are why the others wait.
  for (const auto& [id, node] : r.lost) {
    if (r.joining.contains(id)) continue;
    add(describeLost(id, node));
    if (node.requestedRank >= 0) named.insert(node.requestedRank);
  }
  // The previous round's nodes that are still connected but have not
  // joined again yet.
  for (const auto& id : r.expected) {
    if (r.joining.contains(id) || r.lost.contains(id)) continue;
    const auto node = r.participants.find(id);
    if (node == r.participants.end()) {
      add("node " + id);
      continue;
    }
    // Its node rank: the one it asks for, else the one it had last round.
    const std::int64_t rank =
        node->second.requestedRank >= 0 ? node->second.requestedRank : node->second.groupRank;
    add(protocol::nodeText(id, node->second.address, rank) + ", not back yet");
    if (node->second.requestedRank >= 0) named.insert(node->second.requestedRank);
  }
  // Every node asks for its rank (static jobs, Slurm steps): the ranks
  // nobody has taken or been named for.
  if (r.joining.empty()) return;
  std::set<std::int64_t> taken;
  for (const auto& [id, node] : r.joining) {
    if (node.requestedRank < 0) return;
    taken.insert(node.requestedRank);
  }
  for (std::int64_t rank = 0; rank < static_cast<std::int64_t>(r.maxNodes); ++rank) {
    if (!taken.contains(rank) && !named.contains(rank)) add(fmt::format("node rank {}", rank));
  }
}

void RendezvousManager::peerLost(Peer& peer, const std::string& reason) {
  auto it = byPeer_.find(&peer);
  if (it == byPeer_.end()) return;
  const auto memberships = std::move(it->second);
  byPeer_.erase(it);
  for (const auto& [rdzvId, nodeId] : memberships) {
    Rendezvous* r = find(rdzvId);
    if (r == nullptr) continue;
    const Node* node = nullptr;
    if (const auto p = r->participants.find(nodeId); p != r->participants.end()) node = &p->second;
    if (const auto j = r->joining.find(nodeId); j != r->joining.end()) node = &j->second;
    const bool member = node != nullptr;
    if (member && !r->closed) r->lost[nodeId] = {node->address, node->requestedRank, reason};
    dropJoiner(*r, nodeId);
    const bool wasParticipant = r->participants.erase(nodeId) > 0;
    if (wasParticipant) r->expected.erase(nodeId);
    if (member && !r->closed && cannotReachMinimum(*r)) {
      failJob(*r, 1, lostNodesReport(*r), "");
    } else if (wasParticipant && r->running) {
      endRound(*r, fmt::format("node {} was lost ({})", nodeId, reason), "");
      r->expected.erase(nodeId);
    }
    if (r->closed) markFinishedIfEmpty(*r);
    tryComplete(*r);
  }
}

bool RendezvousManager::cannotReachMinimum(const Rendezvous& r) {
  return r.fixedNodes > 0 && r.fixedNodes < r.minNodes + r.lost.size();
}

std::string RendezvousManager::lostNodesReport(const Rendezvous& r) {
  std::vector<std::string> names;
  for (const auto& [id, node] : r.lost) names.push_back(describeLost(id, node));
  const std::string report = protocol::lostNodesReport(names, r.fixedNodes, r.minNodes);
  DDPRUN_WARN("Rendezvous '{}': {}.", printable(r.id), report);
  // Printed as it is by every other node, like a failing node's report.
  return fmt::format("ddprun: error: {}.\n", report);
}

}  // namespace ddprun::rendezvous
