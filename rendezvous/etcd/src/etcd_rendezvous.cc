#include "ddprun/rendezvous/etcd_rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "ddprun/common/logging.h"
#include "ddprun/rendezvous/store_client.h"
#include "etcd_round.h"

namespace ddprun::rendezvous {

using namespace std::chrono_literals;
using etcd::Phase;
using etcd::RoundState;
using etcd::View;
using Clock = std::chrono::steady_clock;

namespace {

// How long the nodes wait for the designated one to complete a round.
constexpr auto kCompleterGrace = std::chrono::seconds(2);

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool isParticipant(const RoundState& s, const std::string& nodeId) {
  return std::any_of(s.participants.begin(), s.participants.end(),
                     [&](const etcd::NodeInfo& n) { return n.id == nodeId; });
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(EtcdRendezvousOptions options)
    : options_(std::move(options)), client_(options_.etcd), view_(std::make_unique<View>()) {}

void EtcdRendezvous::connect() {
  if (started_ || options_.nodeId.empty()) return;  // done, or an observer
  // Reaching etcd: retried with back-off until the connect timeout, so
  // nodes may start before the cluster is up; shutdown() ends the wait.
  const auto deadline = Clock::now() + options_.connectTimeout;
  auto backoff = 50ms;
  std::minstd_rand jitter(std::random_device{}());
  std::int64_t lease = 0;
  for (;;) {
    try {
      lease = client_.grantLease(std::max(1s, options_.leaseTtl));
      break;
    } catch (const NetworkError& e) {
      if (Clock::now() + backoff >= deadline) {
        throw TimeoutError(fmt::format(
            "etcd at {} could not be reached within {} s ({}); check --rdzv_endpoint and that "
            "etcd runs there",
            client_.endpointList(),
            std::chrono::duration_cast<std::chrono::seconds>(options_.connectTimeout).count(),
            e.what()));
      }
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, backoff + std::chrono::milliseconds(jitter() % 50),
                        [this] { return stopping_; });
      if (stopping_) {
        throw NetworkError(
            fmt::format("reaching etcd at {} was cancelled", client_.endpointList()));
      }
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }
  {
    std::lock_guard lock(mutex_);
    lease_ = lease;
    lastRenewed_ = Clock::now();
  }
  const etcd::Keys keys{base()};
  client_.put(keys.alive(options_.nodeId), options_.nodeId, lease);
  const EtcdRange alive = client_.get(keys.alive(options_.nodeId));
  if (!alive.kvs.empty()) firstSeen_ = alive.kvs.front().createRevision;
  loadView();
  watcher_ = std::thread([this] { runWatch(); });
  started_ = true;
}

EtcdRendezvous::~EtcdRendezvous() {
  shutdown();
  if (watcher_.joinable()) watcher_.join();
  if (lease_ != 0 && !left_) {
    // This node's keys go now rather than after the TTL.
    try {
      client_.revokeLease(lease_);
    } catch (const Error& e) {
      DDPRUN_DEBUG("Could not revoke this node's etcd lease: {}", e.what());
    }
  }
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
  }
  changed_.notify_all();
  if (watch_) watch_->cancel();
}

// --- the view ------------------------------------------------------------------

void EtcdRendezvous::loadView() {
  const etcd::Keys keys{base()};
  const EtcdRange range = client_.getPrefix(keys.base);
  auto view = std::make_unique<View>();
  for (const auto& kv : range.kvs) etcd::apply(*view, keys, kv.key, &kv.value, kv.modRevision);
  view->revision = range.revision;
  view->loaded = true;
  {
    std::lock_guard lock(mutex_);
    const auto before = view_->state;
    view_ = std::move(view);
    if (before || view_->state) onStateChange(before, view_->state);
  }
  watch_ = std::make_unique<EtcdWatch>(options_.etcd, keys.base, range.revision + 1);
  changed_.notify_all();
}

EtcdRendezvousStats EtcdRendezvous::stats() const {
  return EtcdRendezvousStats{client_.requests(), watchEvents_.load()};
}

View EtcdRendezvous::snapshot() {
  std::lock_guard lock(mutex_);
  return *view_;
}

void EtcdRendezvous::runWatch() {
  const etcd::Keys keys{base()};
  auto backoff = 100ms;
  for (;;) {
    std::vector<EtcdWatchEvent> events;
    try {
      events = watch_->next();
      backoff = 100ms;
    } catch (const EtcdCompactedError&) {
      try {
        loadView();
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
      changed_.wait_for(lock, backoff, [this] { return stopping_; });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      if (stopping_) return;
      continue;
    }
    watchEvents_ += events.size();
    std::vector<std::string> lost;
    {
      std::lock_guard lock(mutex_);
      // One response may carry many revisions (a watch catching up): each
      // state in turn, so no round this node is part of goes unseen.
      const std::string alivePrefix = keys.alive("");
      for (const auto& e : events) {
        if (e.deleted && e.kv.key.starts_with(alivePrefix)) {
          const std::string id = e.kv.key.substr(alivePrefix.size());
          if (id != options_.nodeId && view_->alive.contains(id)) lost.push_back(id);
        }
        const auto before = view_->state;
        if (etcd::apply(*view_, keys, e.kv.key, e.deleted ? nullptr : &e.kv.value,
                        e.kv.modRevision)) {
          onStateChange(before, view_->state);
        }
        view_->revision = std::max(view_->revision, e.kv.modRevision);
      }
    }
    changed_.notify_all();
    for (const auto& id : lost) onNodeLost(id);
  }
}

// Called with mutex_ held, for every change of the state key this node
// sees (from the watch or from its own compare-and-swap, whichever first).
void EtcdRendezvous::onStateChange(const std::optional<RoundState>& before,
                                   const std::optional<RoundState>& after) {
  if (after) {
    DDPRUN_DEBUG("etcd rendezvous '{}': round {} is {} ({} nodes, {} restarts).", options_.rdzvId,
                 after->round,
                 after->phase == Phase::kRunning  ? "running"
                 : after->phase == Phase::kClosed ? "closed"
                                                  : "forming",
                 after->participants.size(), after->restarts);
  }
  // A round with this node in it: the JOIN's answer, kept even when the
  // round is over before the JOIN looks (the job may fail that fast).
  if (after && after->round > lastRound_ && (!assigned_ || assigned_->round < after->round)) {
    if (auto assignment = etcd::assignmentOf(*after, options_.nodeId)) assigned_ = assignment;
  }
  if (!before || before->phase != Phase::kRunning || left_) return;
  if (!isParticipant(*before, options_.nodeId)) return;
  if (after && after->phase == Phase::kRunning && after->round == before->round) return;
  if (ownEndedRounds_.contains(before->round)) return;
  protocol::Event event;
  event.rdzvId = options_.rdzvId;
  event.round = before->round;
  if (after && after->phase == Phase::kClosed) {
    event.type = protocol::EventType::kJobFailed;
    event.exitCode = after->failedExitCode;
    event.message = after->failureReport;
  } else {
    event.type = protocol::EventType::kRoundEnded;
    event.message = after ? after->endedReason : "the rendezvous was removed from etcd";
  }
  events_.push_back(std::move(event));
  changed_.notify_all();
}

void EtcdRendezvous::onNodeLost(const std::string& nodeId) {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    const View v = snapshot();
    if (!v.state || v.state->phase != Phase::kRunning || v.left.contains(nodeId) ||
        !isParticipant(*v.state, nodeId)) {
      return;
    }
    // One node acts, not all of them at once: the first live participant
    // (a node that rejoins also ends a round with a lost member).
    const auto actor =
        std::find_if(v.state->participants.begin(), v.state->participants.end(),
                     [&](const etcd::NodeInfo& n) { return v.alive.contains(n.id); });
    if (actor == v.state->participants.end() || actor->id != options_.nodeId) return;
    const RoundState next = etcd::endRound(
        *v.state, fmt::format("node {} stopped renewing its etcd lease", nodeId), nowMs());
    try {
      if (swap(v, next, "", false)) return;  // this is the watch's thread
      // Lost the race: the winner's change is on its way through the watch.
      return;
    } catch (const Error& e) {
      DDPRUN_WARN("Could not end round {} after node {} was lost: {}", v.state->round, nodeId,
                  e.what());
      return;
    }
  }
}

bool EtcdRendezvous::swap(const View& view, const RoundState& next,
                          const std::string& alsoDeletePrefix, bool awaitWatch) {
  const etcd::Keys keys{base()};
  const EtcdSwap result = client_.compareAndSwap(keys.state(), view.stateRevision,
                                                 etcd::toJson(next), 0, alsoDeletePrefix);
  // Every state reaches the view through the watch, in order (a JOIN's
  // answer may be a round that is over by the time it looks): wait until
  // the watch has brought this change, or the one that won.
  const std::int64_t revision = result.succeeded ? result.revision
                                : result.current ? result.current->modRevision
                                                 : 0;
  if (awaitWatch && revision > 0) {  // 0: the state was deleted; the watch brings that too
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stopping_ || view_->revision >= revision; });
  }
  return result.succeeded;
}

void EtcdRendezvous::waitForChange(std::int64_t stateSeen, std::int64_t revision,
                                   Clock::time_point until) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, until, [&] {
    return stopping_ || view_->stateSeen != stateSeen || view_->revision != revision;
  });
}

// --- the calls -----------------------------------------------------------------

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
  me.firstSeen = firstSeen_;
  me.joinedAtMs = nowMs();
  client_.put(keys.joining(me.id), etcd::toJson(me), lease_);
  // Since when the round could complete (min() while it cannot).
  auto readySince = Clock::time_point::min();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) throw NetworkError("the rendezvous was shut down");
    }
    {
      std::lock_guard lock(mutex_);
      if (assigned_) {
        const protocol::Assignment assignment = *assigned_;
        assigned_.reset();
        lastRound_ = assignment.round;
        return assignment;
      }
    }
    const View v = snapshot();
    if (!v.state) {
      swap(v, etcd::initialState(request, nowMs()));
      continue;
    }
    const RoundState& s = *v.state;
    if (request.minNodes != s.minNodes || request.maxNodes != s.maxNodes) {
      throw ServerError(fmt::format(
          "rendezvous '{}' in etcd is for {}:{} nodes but this node asked for {}:{}; give every "
          "node the same --nnodes",
          options_.rdzvId, s.minNodes, s.maxNodes, request.minNodes, request.maxNodes));
    }
    if (std::max<std::int64_t>(0, request.maxRestarts) != s.maxRestarts) {
      throw ServerError(fmt::format(
          "rendezvous '{}' in etcd has a budget of {} restarts but this node asked for {}; give "
          "every node the same --max_restarts",
          options_.rdzvId, s.maxRestarts, request.maxRestarts));
    }
    if (request.nodeRank >= 0) {
      for (const auto& [id, node] : v.joining) {
        if (id != me.id && v.alive.contains(id) && node.requestedRank == request.nodeRank) {
          throw ServerError(fmt::format(
              "node rank {} is already taken by node {}; give every node its own --node_rank",
              request.nodeRank, id));
        }
      }
    }
    // A closed state whose nodes are all gone is a failed job's leftover.
    const bool failedJobAlive = std::any_of(
        s.participants.begin(), s.participants.end(),
        [&](const etcd::NodeInfo& n) { return n.id != me.id && v.alive.contains(n.id); });
    if (s.phase == Phase::kClosed) {
      if (!failedJobAlive) {
        // A failed job's leftover state, and nobody of it is left: a new job.
        DDPRUN_INFO("Rendezvous '{}' in etcd is a failed job's with no node left; starting anew.",
                    options_.rdzvId);
        swap(v, etcd::initialState(request, nowMs()));
        continue;
      }
      throw RendezvousClosedError(
          fmt::format("rendezvous '{}' is closed: the job failed", options_.rdzvId),
          static_cast<int>(s.failedExitCode), s.failureReport);
    }
    if (s.phase == Phase::kRunning) {
      const auto lostOne =
          std::find_if(s.participants.begin(), s.participants.end(), [&](const etcd::NodeInfo& n) {
            return !v.alive.contains(n.id) && !v.left.contains(n.id);
          });
      std::string reason;
      if (lostOne != s.participants.end()) {
        reason = fmt::format("node {} is gone (its etcd lease expired)", lostOne->id);
      } else if (isParticipant(s, me.id) && s.round > lastRound_) {
        continue;  // this node's new round: assigned_ has it
      } else if (isParticipant(s, me.id)) {
        reason = fmt::format("node {} joined again", me.id);
      } else if (s.participants.size() < s.maxNodes) {
        reason = fmt::format("node {} asked to join", me.id);
      }
      if (!reason.empty()) {
        swap(v, etcd::endRound(s, reason, nowMs()));
        continue;
      }
      // Full: this node waits for a slot, its joining key in place.
      if (!v.joining.contains(me.id)) {
        client_.put(keys.joining(me.id), etcd::toJson(me), lease_);
        waitForChange(v.stateSeen, v.revision, deadline);
        continue;
      }
    }
    auto until = deadline;
    if (s.phase == Phase::kForming) {
      std::int64_t wakeAtMs = 0;
      if (auto next = etcd::completeIfReady(v, nowMs(), wakeAtMs)) {
        // One node completes the round (the one that will be group rank
        // 0), not every node at once; the others step in only if it has
        // not within kCompleterGrace (it may have died).
        const bool completer = next->participants.front().id == me.id;
        const bool waited =
            readySince != Clock::time_point::min() && Clock::now() - readySince >= kCompleterGrace;
        if (completer || waited) {
          // Every joining key goes with it; a node left over (more than
          // MAX joined) puts its key back when it sees the round.
          swap(v, *next, keys.joining(""));
          continue;
        }
        if (readySince == Clock::time_point::min()) readySince = Clock::now();
        wakeAtMs = nowMs() +
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       readySince + kCompleterGrace - Clock::now())
                       .count() +
                   1;
      } else {
        readySince = Clock::time_point::min();
      }
      if (wakeAtMs > 0) {
        until = std::min(until, Clock::now() + std::chrono::milliseconds(wakeAtMs - nowMs()));
      }
    }
    if (Clock::now() >= deadline) {
      const protocol::RendezvousStatus st = etcd::statusOf(v, false, nowMs());
      throw TimeoutError(fmt::format("rendezvous '{}' did not complete: {} of {}{} nodes joined{}",
                                     options_.rdzvId, st.joined,
                                     st.minNodes == st.maxNodes ? "" : "at least ", st.minNodes,
                                     protocol::missingNodesText(st)));
    }
    DDPRUN_DEBUG("etcd rendezvous '{}': node {} waits (revision {}, {} joining, {} alive).",
                 options_.rdzvId, me.id, v.revision, v.joining.size(), v.alive.size());
    waitForChange(v.stateSeen, v.revision, until);
  }
}

protocol::RestartDecision EtcdRendezvous::reportFailure(const protocol::NodeReport& report) {
  for (;;) {
    const View v = snapshot();
    if (!v.state) return {};
    const RoundState& s = *v.state;
    if (s.phase != Phase::kRunning || s.round != report.round || !isParticipant(s, report.nodeId)) {
      // Another node's failure (or a lost node) ended the round first: the
      // decision taken for it stands.
      return {s.restarts, s.phase != Phase::kClosed};
    }
    RoundState next = s;
    next.lastFailure = {report.nodeId, report.round, report.exitCode, report.failedAtMs,
                        report.report};
    if (s.restarts < s.maxRestarts) {
      ++next.restarts;
      next = etcd::endRound(next,
                            fmt::format("a worker on node {} failed (restart {} of {})",
                                        report.nodeId, next.restarts, next.maxRestarts),
                            nowMs());
    } else {
      next.phase = Phase::kClosed;
      next.failedExitCode = report.exitCode;
      next.failureReport = report.report;
    }
    {
      std::lock_guard lock(mutex_);
      ownEndedRounds_.insert(s.round);  // the server does not tell the reporter either
    }
    if (swap(v, next)) return {next.restarts, next.phase != Phase::kClosed};
  }
}

void EtcdRendezvous::leave(const protocol::NodeReport& report) {
  const etcd::Keys keys{base()};
  client_.put(keys.left(report.nodeId), std::to_string(report.round));
  {
    std::lock_guard lock(mutex_);
    left_ = true;
  }
  // The last node out removes the rendezvous, so the id can be used again.
  const EtcdRange range = client_.getPrefix(keys.base);
  View v;
  for (const auto& kv : range.kvs) etcd::apply(v, keys, kv.key, &kv.value, kv.modRevision);
  const bool everyoneLeft =
      v.state && v.joining.empty() &&
      std::all_of(v.state->participants.begin(), v.state->participants.end(),
                  [&](const etcd::NodeInfo& n) { return v.left.contains(n.id); });
  if (everyoneLeft && client_.compareAndDelete(keys.state(), v.stateRevision)) {
    client_.deletePrefix(keys.base);
  }
  client_.revokeLease(lease_);
}

protocol::RendezvousStatus EtcdRendezvous::status(const std::string& rdzvId, bool details) {
  if (rdzvId == options_.rdzvId && started_) {
    return etcd::statusOf(snapshot(), details, nowMs());
  }
  const etcd::Keys keys{base(rdzvId)};
  const EtcdRange range = client_.getPrefix(keys.base);
  View v;
  for (const auto& kv : range.kvs) etcd::apply(v, keys, kv.key, &kv.value, kv.modRevision);
  return etcd::statusOf(v, details, nowMs());
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

void EtcdRendezvous::keepAlive() {
  {
    std::lock_guard lock(mutex_);
    if (left_ || lease_ == 0) return;
  }
  std::int64_t ttl = 0;
  try {
    ttl = client_.keepAliveLease(lease_);
  } catch (const NetworkError& e) {
    // No member answered this time: the lease may still hold until its
    // TTL has passed since the last renewal; the next renewal tries again.
    if (Clock::now() - lastRenewed_ < options_.leaseTtl) {
      DDPRUN_WARN("Renewing this node's etcd lease failed ({}); trying again.", e.what());
      return;
    }
    throw;
  }
  if (ttl <= 0) {
    throw NetworkError(fmt::format(
        "this node's etcd lease expired: the other nodes count it as lost (its renewals did not "
        "reach etcd at {} in time)",
        client_.endpointList()));
  }
  lastRenewed_ = Clock::now();
}

}  // namespace ddprun::rendezvous
