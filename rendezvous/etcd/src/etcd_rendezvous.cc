#include "ddprun/rendezvous/etcd_rendezvous.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/logging.h"
#include "ddprun/common/retry_backoff.h"
#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/round_text.h"
#include "ddprun/rendezvous/store_client.h"
#include "etcd_coordinator.h"
#include "etcd_round.h"

namespace ddprun::rendezvous {

using namespace std::chrono_literals;
using etcd::Phase;
using etcd::RoundState;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

EtcdRangeRequest countOf(const std::string& prefix) {
  EtcdRangeRequest request;
  request.key = prefix;
  request.rangeEnd = etcdPrefixEnd(prefix);
  request.countOnly = true;
  return request;
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(EtcdRendezvousOptions options)
    : options_(std::move(options)), client_(options_.etcd), renewals_(options_.etcd) {
  options_.jobTtl = std::max(options_.jobTtl, 4 * std::max(1s, options_.leaseTtl));
}

void EtcdRendezvous::connect() {
  if (started_ || options_.nodeId.empty()) return;  // done, or an observer
  // Reaching etcd: retried with back-off until the connect timeout, so
  // nodes may start before the cluster is up; shutdown() ends the wait.
  const auto deadline = Clock::now() + options_.connectTimeout;
  RetryBackoff backoff(50ms, 1000ms);
  std::int64_t lease = 0;
  for (;;) {
    try {
      lease = client_.grantLease(std::max(1s, options_.leaseTtl));
      break;
    } catch (const NetworkError& e) {
      const auto wait = backoff.next();
      if (Clock::now() + wait >= deadline) {
        throw TimeoutError(fmt::format(
            "etcd at {} could not be reached within {} s ({}); check --rdzv_endpoint and that "
            "etcd runs there",
            client_.endpointList(),
            std::chrono::duration_cast<std::chrono::seconds>(options_.connectTimeout).count(),
            e.what()));
      }
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, wait, [this] { return stopping_; });
      if (stopping_) {
        throw NetworkError(
            fmt::format("reaching etcd at {} was cancelled", client_.endpointList()));
      }
    }
  }
  std::lock_guard lock(mutex_);
  lease_ = lease;
  started_ = true;
}

void EtcdRendezvous::registerNode(const etcd::NodeInfo& me) {
  const etcd::Keys keys{base()};
  openWatch();
  // One transaction: the alive key (its create revision orders the nodes
  // and guards the coordinator's writes), the joining key, the state, the
  // alive key as written, and `newest`, read and then pointed at this
  // node: the node that registered just before, this node's predecessor
  // (one key read, where the newest alive keys by creation would be a
  // sort of them all in etcd).
  const std::string alive = keys.alive(me.id);
  const EtcdTxnResult txn =
      client_.txn({}, {EtcdOp::put(alive, "", lease_),
                       EtcdOp::put(keys.joining(me.id), etcd::toJson(me), lease_),
                       EtcdOp::read(keys.state()), EtcdOp::read(alive), EtcdOp::read(keys.newest()),
                       EtcdOp::put(keys.newest(), alive, lease_)});
  if (txn.ranges.size() != 3 || txn.ranges[1].kvs.empty()) {
    throw ProtocolError("etcd answered a transaction incompletely");
  }
  const EtcdRange& state = txn.ranges[0];
  aliveRevision_ = txn.ranges[1].kvs.front().createRevision;
  std::optional<std::string> predecessor;
  std::int64_t watchFrom = txn.revision + 1;
  if (const auto& newest = txn.ranges[2].kvs; !newest.empty() && newest.front().value != alive &&
                                              newest.front().modRevision < aliveRevision_) {
    // Its alive key was created with `newest` (one transaction): any
    // deletion comes after.
    predecessor = newest.front().value;
    watchFrom = newest.front().modRevision + 1;
  } else {
    // The first node; or the one before has gone since (its lease took
    // `newest`); or an earlier attempt of this transaction (etcd said it
    // timed out, then carried it out) set it: the one before, found as a
    // succession finds it.
    const EtcdRange found = newestAliveBefore(aliveRevision_);
    if (!found.kvs.empty()) predecessor = found.kvs.front().key;
  }
  const bool oldest = !predecessor;
  {
    std::lock_guard lock(mutex_);
    onStateRead(state);
    if (stopping_) throw NetworkError("the rendezvous was shut down");
    if (!oldest) predecessorKey_ = *predecessor;
  }
  // Its deletion (from a past revision: etcd's sync brings it within
  // 100 ms, soon enough for a succession).
  if (!oldest) watch_->add(*predecessor, "", watchFrom);
  watcher_ = std::thread([this] { runWatch(); });
  if (oldest) startCoordinator();
  registered_ = true;
}

void EtcdRendezvous::openWatch() {
  const etcd::Keys keys{base()};
  auto watch =
      std::make_unique<EtcdWatch>(options_.etcd,
                                  std::vector<std::pair<std::string, std::string>>{
                                      {keys.state(), ""}, {keys.assign(options_.nodeId), ""}},
                                  0);
  EtcdWatch* started = watch.get();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw NetworkError("the rendezvous was shut down");
    watch_ = std::move(watch);
  }
  started->start();
}

void EtcdRendezvous::startCoordinator() {
  etcd::CoordinatorOptions options{options_.etcd,  options_.rdzvId, options_.nodeId, base(),
                                   aliveRevision_, options_.jobTtl, &watchEvents_};
  std::lock_guard lock(mutex_);
  if (stopping_ || coordinator_) return;
  coordinator_ = std::make_unique<etcd::EtcdCoordinator>(options, client_);
  if (request_) coordinator_->offer(*request_);
  coordinated_ = true;
  coordinatorThread_ = std::thread([c = coordinator_.get()] { c->run(); });
}

void EtcdRendezvous::onPredecessorGone() {
  // etcd's election recipe: the alive key created just before this node's
  // now; none means this node is the oldest and coordinates.
  const EtcdRange predecessor = newestAliveBefore(aliveRevision_);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    predecessorKey_ = predecessor.kvs.empty() ? "" : predecessor.kvs.front().key;
  }
  if (predecessor.kvs.empty()) {
    startCoordinator();
  } else {
    watch_->add(predecessor.kvs.front().key, "", predecessor.revision + 1);
  }
}

EtcdRendezvous::~EtcdRendezvous() {
  shutdown();
  if (watcher_.joinable()) watcher_.join();
  if (coordinatorThread_.joinable()) coordinatorThread_.join();
  coordinator_.reset();
  if (lease_ != 0 && !left_) {
    // This node's keys go now rather than after the TTL.
    try {
      client_.revokeLease(lease_);
    } catch (const Error& e) {
      DDPRUN_DEBUG("Could not revoke this node's etcd lease: {}", e.what());
    }
  }
}

void EtcdRendezvous::publishNodeCounters(protocol::NodeCounters kind, const std::string& rdzvId,
                                         const std::string& nodeId, const std::string& text) {
  std::int64_t lease = 0;
  {
    std::lock_guard lock(mutex_);
    lease = lease_;
  }
  client_.put(etcd::Keys{base(rdzvId)}.counters(kind, nodeId), text, lease);
}

std::vector<std::string> EtcdRendezvous::nodeCounters(protocol::NodeCounters kind,
                                                      const std::string& rdzvId,
                                                      const std::vector<std::string>& nodeIds) {
  std::vector<std::string> texts;
  const etcd::Keys keys{base(rdzvId)};
  for (const auto& id : nodeIds) {
    const EtcdRange found = client_.get(keys.counters(kind, id));
    texts.push_back(found.kvs.empty() ? std::string() : found.kvs.front().value);
  }
  return texts;
}

std::string EtcdRendezvous::base(const std::string& rdzvId) const {
  std::string prefix = options_.etcd.prefix;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return prefix + "/" + rdzvId + "/";
}

void EtcdRendezvous::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (watch_) watch_->cancel();
    if (coordinator_) coordinator_->stop();
  }
  changed_.notify_all();
}

EtcdRendezvousStats EtcdRendezvous::stats() const {
  return EtcdRendezvousStats{client_.requests() + renewals_.requests(), watchEvents_.load(),
                             coordinated_.load()};
}

// --- the state -----------------------------------------------------------------

void EtcdRendezvous::reload() {
  // After a compaction: a new watch, then what the old one missed.
  openWatch();
  const etcd::Keys keys{base()};
  std::string predecessor;
  {
    std::lock_guard lock(mutex_);
    predecessor = predecessorKey_;
  }
  std::vector<EtcdOp> reads{EtcdOp::read(keys.state()), EtcdOp::read(keys.assign(options_.nodeId))};
  if (!predecessor.empty()) reads.push_back(EtcdOp::read(predecessor));
  const EtcdTxnResult read = client_.txn({}, reads);
  if (read.ranges.size() != reads.size()) {
    throw ProtocolError("etcd answered a transaction incompletely");
  }
  {
    std::lock_guard lock(mutex_);
    if (!read.ranges[1].kvs.empty()) noteAssign(read.ranges[1].kvs.front().value);
    onStateRead(read.ranges[0]);
    takeAssignment();
    if (stopping_) return;
  }
  if (predecessor.empty()) return;
  if (read.ranges[2].kvs.empty()) {
    onPredecessorGone();
  } else {
    watch_->add(predecessor, "", read.revision + 1);
  }
}

void EtcdRendezvous::runWatch() {
  const etcd::Keys keys{base()};
  const std::string assignKey = keys.assign(options_.nodeId);
  RetryBackoff backoff(100ms, 2000ms);
  for (;;) {
    EtcdWatch* watch = nullptr;
    std::string predecessor;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      watch = watch_.get();
      predecessor = predecessorKey_;
    }
    std::vector<EtcdWatchEvent> events;
    try {
      events = watch->next();
      backoff.reset();
    } catch (const EtcdCompactedError&) {
      try {
        reload();
      } catch (const Error& e) {
        DDPRUN_WARN("Reloading the rendezvous from etcd failed: {}", e.what());
      }
      continue;
    } catch (const Error& e) {
      // Every member is unreachable (or this is the stop): the lease's
      // renewal decides whether the node is lost; the watch tries again.
      std::unique_lock lock(mutex_);
      if (stopping_) return;
      DDPRUN_WARN("The etcd watch of rendezvous '{}' broke ({}); retrying.", options_.rdzvId,
                  e.what());
      changed_.wait_for(lock, backoff.next(), [this] { return stopping_; });
      continue;
    }
    watchEvents_ += events.size();
    std::int64_t predecessorGoneAt = 0;  // the revision of its deletion
    // One response may carry many revisions (a watch catching up): each
    // state in turn, so no round this node is part of goes unseen.
    for (const auto& e : events) {
      if (e.kv.key == keys.state()) {
        auto state = e.deleted ? std::nullopt : etcd::stateFromJson(e.kv.value);
        if (!e.deleted && !state) {
          DDPRUN_WARN("Rendezvous '{}': etcd holds a state this ddprun cannot read; ignored.",
                      options_.rdzvId);
          continue;
        }
        bool unassigned = false;
        {
          std::lock_guard lock(mutex_);
          onState(std::move(state), e.kv.modRevision);
          takeAssignment();
          unassigned = request_ && state_ && state_->phase == Phase::kRunning &&
                       state_->round > lastRound_ &&
                       !(assigned_ && assigned_->round == state_->round);
        }
        // The stream delivers each watched key's events in order, but not
        // the assign key's before the state's: read it now, before the next
        // state, so that a round that ends at once is still this node's.
        if (unassigned) {
          try {
            readAssignment();
          } catch (const Error& err) {
            // join() reads it too, once per round.
            DDPRUN_WARN("Reading this node's assignment from etcd failed ({}).", err.what());
          }
        }
      } else if (e.kv.key == assignKey) {
        if (e.deleted) continue;
        std::lock_guard lock(mutex_);
        noteAssign(e.kv.value);
        takeAssignment();
      } else if (e.kv.key == predecessor && e.deleted) {
        predecessorGoneAt = e.kv.modRevision;
      }
    }
    if (predecessorGoneAt > 0) {
      try {
        onPredecessorGone();
      } catch (const Error& e) {
        DDPRUN_WARN("Finding the node before {} in etcd failed ({}); trying again.",
                    options_.nodeId, e.what());
        // The same key again from its deletion: the event comes back.
        watch->add(predecessor, "", predecessorGoneAt);
      }
    }
  }
}

void EtcdRendezvous::noteAssign(const std::string& value) {
  if (auto record = etcd::assignFromJson(value)) {
    pendingAssign_ = std::make_unique<etcd::AssignRecord>(*record);
  }
}

void EtcdRendezvous::takeAssignment() {
  // A round with this node in it: the JOIN's answer, kept even when the
  // round is over before the JOIN looks (the job may fail that fast).
  if (!state_ || !pendingAssign_ || !request_) return;
  auto assignment = etcd::assignmentOf(*state_, *pendingAssign_);
  if (assignment && assignment->round > lastRound_ &&
      (!assigned_ || assigned_->round < assignment->round)) {
    assigned_ = assignment;
    changed_.notify_all();
  }
}

void EtcdRendezvous::onStateRead(const EtcdRange& state) {
  if (state.kvs.empty()) {
    onState(std::nullopt, 0);
  } else if (auto read = etcd::stateFromJson(state.kvs.front().value)) {
    onState(std::move(read), state.kvs.front().modRevision);
  }
}

// Called with mutex_ held, for every change of the state key this node
// sees (from the watch or from its own compare-and-swap, whichever first).
void EtcdRendezvous::onState(std::optional<RoundState> after, std::int64_t modRevision) {
  if (after && modRevision <= stateRevision_) return;  // older than what this node has
  std::optional<RoundState> before;
  if (state_) before = *state_;
  state_ = after ? std::make_unique<RoundState>(*after) : nullptr;
  stateRevision_ = after ? modRevision : 0;
  changed_.notify_all();
  if (!after) return;
  DDPRUN_DEBUG("etcd rendezvous '{}': round {} is {} ({} nodes, {} restarts).", options_.rdzvId,
               after->round,
               after->phase == Phase::kRunning  ? "running"
               : after->phase == Phase::kClosed ? "closed"
                                                : "forming",
               after->groupWorldSize, after->restarts);
  const auto push = [&](protocol::EventType type, std::int64_t round, std::string message) {
    protocol::Event event;
    event.type = type;
    event.rdzvId = options_.rdzvId;
    event.round = round;
    event.message = std::move(message);
    events_.push_back(std::move(event));
  };
  // Hosts excluded and readmitted: every node hears it, as from the c10d
  // server.
  for (const auto& [address, host] : after->hosts) {
    const bool was = before && policy::excluded(before->hosts, address, 0);
    if (host.excludedUntilMs > 0 && !was) {
      push(protocol::EventType::kNodeExcluded, after->round,
           policy::exclusionText(options_.rdzvId, after->settings(),
                                 {address, host.node, host.streak, host.excludedUntilMs}));
    }
  }
  if (before) {
    for (const auto& [address, host] : before->hosts) {
      if (host.excludedUntilMs > 0 && !policy::excluded(after->hosts, address, 0)) {
        push(protocol::EventType::kNodeReadmitted, after->round,
             policy::readmittedText(options_.rdzvId, address));
      }
    }
  }
  // The end of a round this node takes part in.
  if (!before || before->phase != Phase::kRunning || left_) return;
  const bool participant =
      lastRound_ == before->round || (assigned_ && assigned_->round == before->round);
  if (!participant) return;
  if (after->phase == Phase::kRunning && after->round == before->round) return;
  if (ownEndedRounds_.contains(before->round)) return;
  if (after->phase == Phase::kClosed) {
    protocol::Event event;
    event.type = protocol::EventType::kJobFailed;
    event.rdzvId = options_.rdzvId;
    event.round = before->round;
    event.exitCode = after->failedExitCode;
    event.message = after->failureReport;
    events_.push_back(std::move(event));
  } else {
    push(protocol::EventType::kRoundEnded, before->round, after->endedReason);
  }
}

void EtcdRendezvous::readAssignment() {
  const EtcdRange range = client_.get(etcd::Keys{base()}.assign(options_.nodeId));
  std::lock_guard lock(mutex_);
  if (!range.kvs.empty()) noteAssign(range.kvs.front().value);
  takeAssignment();
}

void EtcdRendezvous::waitForChange(std::int64_t stateRevision, Clock::time_point until) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, until, [&] {
    return stopping_ || stateRevision_ != stateRevision || assigned_.has_value();
  });
}

EtcdRange EtcdRendezvous::newestAliveBefore(std::int64_t createRevision) {
  EtcdRangeRequest older;
  older.key = etcd::Keys{base()}.alive("");
  older.rangeEnd = etcdPrefixEnd(older.key);
  older.maxCreateRevision = createRevision - 1;
  older.newestCreatedFirst = true;
  older.limit = 1;
  return client_.range(older);
}

std::int64_t EtcdRendezvous::aliveBefore(std::int64_t revision) {
  EtcdRangeRequest request = countOf(etcd::Keys{base()}.alive(""));
  request.maxCreateRevision = std::max<std::int64_t>(1, revision - 1);
  return client_.range(request).count;
}

// --- the calls -----------------------------------------------------------------

void EtcdRendezvous::claimNodeRank(std::int64_t nodeRank) {
  const etcd::Keys keys{base()};
  const std::string key = keys.rank(nodeRank);
  const EtcdTxnResult claim =
      client_.txn({EtcdCompare{key, EtcdCompare::Target::kCreate, 0}},
                  {EtcdOp::put(key, options_.nodeId, lease_)}, {EtcdOp::read(key)});
  if (claim.succeeded || claim.ranges.empty() || claim.ranges.front().kvs.empty()) return;
  const std::string holder = claim.ranges.front().kvs.front().value;
  if (holder != options_.nodeId) {
    throw ServerError(
        fmt::format("node rank {} is already taken by node {}; give every node its own --node_rank",
                    nodeRank, holder));
  }
  client_.put(key, options_.nodeId, lease_);  // this node again, on its new lease
}

protocol::Assignment EtcdRendezvous::join(const protocol::JoinRequest& request,
                                          std::chrono::milliseconds timeout) {
  if (options_.nodeId.empty()) throw Error("an etcd rendezvous observer cannot join");
  connect();
  const auto deadline = Clock::now() + timeout;
  const etcd::Keys keys{base()};
  etcd::NodeInfo me;
  me.id = options_.nodeId;
  me.requestedRank = request.nodeRank;
  me.localWorldSize = std::max<std::uint32_t>(1, request.localWorldSize);
  me.address = request.address.empty() ? client_.localAddress() : request.address;
  me.masterPort = request.masterPort;
  me.firstSeen = aliveRevision_;  // 0 before registerNode(): the coordinator uses alive/
  me.joinedAtMs = nowMs();
  {
    std::lock_guard lock(mutex_);
    request_ = request;
    address_ = me.address;
    if (coordinator_) coordinator_->offer(request);
  }
  if (request.nodeRank >= 0) claimNodeRank(request.nodeRank);
  if (!registered_) {
    registerNode(me);
  } else {
    try {
      client_.put(keys.joining(me.id), etcd::toJson(me), lease_);
    } catch (const ServerError& e) {
      // Paused past its TTL (or cut off): the others have counted it lost.
      if (std::string(e.what()).find("lease not found") != std::string::npos) {
        throw leaseExpired();
      }
      throw;
    }
  }
  std::int64_t readFor = 0;      // the running round whose assign key this JOIN read
  std::int64_t rejoinedFor = 0;  // the running round this node put its key back for
  for (;;) {
    std::optional<RoundState> state;
    std::int64_t revision = 0;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) throw NetworkError("the rendezvous was shut down");
      if (assigned_) {
        const protocol::Assignment assignment = *assigned_;
        assigned_.reset();
        request_.reset();
        lastRound_ = assignment.round;
        return assignment;
      }
      if (state_) state = *state_;
      revision = stateRevision_;
    }
    auto until = deadline;
    if (state) {
      const RoundState& s = *state;
      if (const std::string mismatch =
              policy::settingsMismatch(options_.rdzvId, s.settings(), request);
          !mismatch.empty()) {
        throw ServerError(mismatch);
      }
      if (s.phase == Phase::kClosed && aliveBefore(revision) > 0) {
        throw RendezvousClosedError(
            fmt::format("rendezvous '{}' is closed: the job failed", options_.rdzvId),
            static_cast<int>(s.failedExitCode), s.failureReport);
      }
      // (A closed state with none of its nodes left: the coordinator starts
      // it afresh.)
      if (const std::int64_t now = nowMs(); policy::excluded(s.hosts, me.address, now)) {
        throw NodeExcludedError(policy::refusalText(options_.rdzvId, s.settings(), me.id,
                                                    me.address, s.hosts.at(me.address), now));
      }
      if (s.phase == Phase::kRunning && s.round > lastRound_) {
        if (readFor < s.round) {
          // The assign key's event comes before the state's; in case the
          // stream delivered them out of order, read it once.
          readFor = s.round;
          readAssignment();
          continue;
        }
        if (rejoinedFor < s.round) {
          // Left over (the round took MAX nodes, or formed without this
          // node's key): wait for a slot with the key in place again.
          client_.put(keys.joining(me.id), etcd::toJson(me), lease_);
          rejoinedFor = s.round;
        }
      }
      for (const auto& [address, host] : s.hosts) {
        if (host.excludedUntilMs > 0) {
          until = std::min(until, Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(
                                                     1, host.excludedUntilMs - nowMs())));
        }
      }
    }
    if (Clock::now() >= deadline) {
      // One read of every key, once: who is missing, in the policy's words.
      throw AnsweredTimeoutError(
          policy::joinTimeoutText(options_.rdzvId, statusOf(options_.rdzvId, false, true)));
    }
    waitForChange(revision, until);
  }
}

protocol::RestartDecision EtcdRendezvous::reportFailure(const protocol::NodeReport& report) {
  const etcd::Keys keys{base()};
  std::int64_t jobLease = 0;
  std::string address;
  {
    std::lock_guard lock(mutex_);
    if (state_) jobLease = state_->jobLease;
    address = address_;
  }
  // What host exclusion needs: who failed, where and when (the coordinator
  // reads these when the next round forms).
  if (jobLease != 0) {
    client_.put(keys.failure(report.round, report.nodeId),
                etcd::toJson(etcd::FailureRecord{address, report.failedAtMs, report.lostAPeer}),
                jobLease);
  }
  for (;;) {
    std::optional<RoundState> state;
    std::int64_t revision = 0;
    bool participant = false;
    {
      std::lock_guard lock(mutex_);
      if (state_) state = *state_;
      revision = stateRevision_;
      participant = lastRound_ == report.round;
    }
    if (!state) return {};
    const RoundState& s = *state;
    if (s.phase != Phase::kRunning || s.round != report.round || !participant) {
      // Another node's failure (or a lost node) ended the round first: the
      // decision taken for it stands.
      return {s.restarts, s.phase != Phase::kClosed};
    }
    RoundState next = s;
    next.lastFailure = {report.nodeId, report.round, report.exitCode, report.failedAtMs,
                        report.report};
    const policy::FailureOutcome out =
        policy::spendRestart(s.settings(), s.restarts, report.nodeId, report.giveUp);
    next.restarts = out.restarts;
    if (out.restartAllowed) {
      next = etcd::endRound(next, out.endReason, nowMs());
    } else {
      next.phase = Phase::kClosed;
      next.failedExitCode = report.exitCode;
      next.failureReport = report.report;
    }
    {
      std::lock_guard lock(mutex_);
      ownEndedRounds_.insert(s.round);  // the server does not tell the reporter either
    }
    const EtcdSwap swap =
        client_.compareAndSwap(keys.state(), revision, etcd::toJson(next), s.jobLease);
    std::lock_guard lock(mutex_);
    if (swap.succeeded) {
      onState(next, swap.revision);
      return {next.restarts, next.phase != Phase::kClosed};
    }
    if (swap.current) {
      onState(etcd::stateFromJson(swap.current->value), swap.current->modRevision);
    } else {
      onState(std::nullopt, 0);
    }
  }
}

void EtcdRendezvous::leave(const protocol::NodeReport& report) {
  const etcd::Keys keys{base()};
  std::optional<RoundState> state;
  std::int64_t revision = 0;
  {
    std::lock_guard lock(mutex_);
    left_ = true;
    if (state_) state = *state_;
    revision = stateRevision_;
  }
  if (state) {
    client_.put(keys.left(report.nodeId), etcd::leftValue(report.round, report.exitCode),
                state->jobLease);
  }
  client_.revokeLease(lease_);  // its alive, joining and rank keys go
  // The last node out removes the rendezvous, so the id can be used again:
  // every node of the round has left and none waits.
  if (!state) return;
  const std::int64_t gone = client_.range(countOf(keys.left(""))).count;
  const std::int64_t waiting = client_.range(countOf(keys.joining(""))).count;
  if (gone >= state->groupWorldSize && waiting == 0 &&
      client_.compareAndDelete(keys.state(), revision)) {
    client_.deletePrefix(keys.base);
    client_.revokeLease(state->jobLease);
  }
}

protocol::RendezvousStatus EtcdRendezvous::status(const std::string& rdzvId, bool details) {
  // A waiting node's progress line: its own view and one count (a read of
  // every key by every waiting node at each line would cost O(N^2)).
  const bool cheap = rdzvId == options_.rdzvId && registered_ && !details;
  return statusOf(rdzvId, details, !cheap);
}

protocol::RendezvousStatus EtcdRendezvous::statusOf(const std::string& rdzvId, bool details,
                                                    bool full) {
  const etcd::Keys keys{base(rdzvId)};
  protocol::RendezvousStatus st;
  std::optional<RoundState> state;
  std::map<std::string, etcd::NodeInfo> joining;
  std::set<std::string> alive;
  std::map<std::string, std::int64_t> left;  // node -> the exit code it left with
  std::vector<etcd::NodeInfo> participants;
  if (!full) {
    std::lock_guard lock(mutex_);
    if (state_) state = *state_;
  } else {
    const EtcdRange range = client_.getPrefix(keys.base);
    for (const auto& kv : range.kvs) {
      const std::string rest = kv.key.substr(keys.base.size());
      if (rest == "state") {
        state = etcd::stateFromJson(kv.value);
      } else if (rest.starts_with("alive/")) {
        alive.insert(rest.substr(6));
      } else if (rest.starts_with("left/")) {
        left[rest.substr(5)] = etcd::leftExitCode(kv.value);
      } else if (rest.starts_with("joining/")) {
        if (auto node = etcd::nodeFromJson(kv.value)) joining[rest.substr(8)] = *node;
      }
    }
    if (state) {
      for (const auto& kv : range.kvs) {
        if (kv.key == keys.round(state->round)) participants = etcd::participantsFromJson(kv.value);
      }
    }
  }
  if (!state) return st;
  const RoundState& s = *state;
  st.exists = true;
  st.round = s.round;
  st.running = s.phase == Phase::kRunning;
  st.minNodes = s.minNodes;
  st.maxNodes = s.maxNodes;
  if (!full) {
    st.joined = static_cast<std::uint32_t>(client_.range(countOf(keys.joining(""))).count);
    return st;
  }
  std::vector<policy::Member> waiting;
  for (const auto& [id, node] : joining) {
    if (!alive.contains(id)) continue;
    ++st.joined;
    waiting.push_back(etcd::memberOf(node));
    waiting.back().id = id;
  }
  if (s.phase == Phase::kForming) {
    // The policy's words: the lost nodes (a fixed set's, and the ended
    // round's gone without a leave), the ended round's nodes not back yet,
    // the node ranks nobody took.
    std::map<std::string, policy::LostNode> lost = s.lost;
    std::vector<policy::NotBack> notBack;
    for (std::size_t rank = 0; rank < participants.size(); ++rank) {
      const etcd::NodeInfo& n = participants[rank];
      if (joining.contains(n.id) && alive.contains(n.id)) continue;
      if (!alive.contains(n.id)) {
        if (const auto why = etcd::lostReason(left, n.id)) {
          lost.try_emplace(n.id, n.address, n.requestedRank, *why);
        }
      } else {
        notBack.push_back({etcd::memberOf(n), static_cast<std::uint32_t>(rank)});
      }
    }
    policy::describeMissing(s.settings(), lost, notBack, waiting, st);
  }
  if (!details) return st;
  st.closed = s.phase == Phase::kClosed;
  st.restarts = s.restarts;
  st.maxRestarts = s.maxRestarts;
  st.lastFailure = s.lastFailure;
  if (s.phase == Phase::kRunning) {
    for (std::size_t rank = 0; rank < participants.size(); ++rank) {
      const etcd::NodeInfo& n = participants[rank];
      st.members.push_back({n.id, n.address, static_cast<std::int64_t>(rank), n.localWorldSize});
    }
  }
  for (const auto& [id, node] : joining) {
    if (alive.contains(id)) st.members.push_back({id, node.address, -1, node.localWorldSize});
  }
  return st;
}

std::optional<std::chrono::seconds> EtcdRendezvous::jobExpiresIn(const std::string& rdzvId) {
  const EtcdRange range = client_.get(etcd::Keys{base(rdzvId)}.state());
  if (range.kvs.empty()) return std::nullopt;
  const auto state = etcd::stateFromJson(range.kvs.front().value);
  if (!state || state->jobLease == 0) return std::nullopt;
  const std::int64_t ttl = client_.leaseTimeToLive(state->jobLease);
  if (ttl < 0) return std::nullopt;
  return std::chrono::seconds(ttl);
}

std::optional<protocol::Event> EtcdRendezvous::waitEvent(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto ready = [this] { return stopping_ || !events_.empty(); };
  if (timeout.count() >= std::chrono::milliseconds::max().count() / 2) {
    changed_.wait(lock, ready);
  } else if (!changed_.wait_for(lock, timeout, ready)) {
    return std::nullopt;
  }
  if (!events_.empty()) {
    protocol::Event event = std::move(events_.front());
    events_.pop_front();
    return event;
  }
  throw NetworkError("the rendezvous was shut down");
}

NetworkError EtcdRendezvous::leaseExpired() const {
  return NetworkError(fmt::format(
      "this node's etcd lease expired: the other nodes count it as lost (its renewals did not "
      "reach etcd at {} in time)",
      client_.endpointList()));
}

void EtcdRendezvous::keepAlive(Clock::time_point deadline) {
  std::int64_t jobLease = 0;
  {
    std::lock_guard lock(mutex_);
    if (left_ || lease_ == 0) return;
    if (state_) jobLease = state_->jobLease;
  }
  std::int64_t ttl = 0;
  std::string failure;  // no member answered (etcd refusing throws at once)
  try {
    ttl = renewals_.keepAliveLease(lease_, deadline);
    // The job's keys live while any node of it does.
    if (jobLease != 0) renewals_.keepAliveLease(jobLease, deadline);
  } catch (const NetworkError& e) {
    failure = e.what();
  } catch (const TimeoutError& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    // The lease may still hold until the deadline (its TTL since the last
    // renewal); the next renewal tries again.
    if (Clock::now() < deadline) {
      DDPRUN_WARN("Renewing this node's etcd lease failed ({}); trying again.", failure);
      return;
    }
    throw TimeoutError(
        fmt::format("this node's etcd lease could not be renewed in time: {}", failure));
  }
  if (ttl <= 0) throw leaseExpired();
}

}  // namespace ddprun::rendezvous
