#include "etcd_coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "ddprun/common/logging.h"
#include "ddprun/common/retry_backoff.h"
#include "ddprun/rendezvous/round_policy.h"
#include "ddprun/rendezvous/round_text.h"
#include "etcd_round.h"

namespace ddprun::rendezvous::etcd {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// etcd refuses a transaction of more than 128 operations by default.
constexpr std::size_t kOpsPerTxn = 127;

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string newPublishId() {
  static thread_local std::mt19937_64 random(std::random_device{}());
  return fmt::format("{:016x}", random());
}

}  // namespace

// Everything under the rendezvous's prefix that the coordinator needs, with
// the counts it decides on kept current event by event.
struct CoordinatorView {
  std::int64_t revision = 0;
  std::optional<RoundState> state;
  std::int64_t stateRevision = 0;             // the state key's mod revision
  std::map<std::string, std::int64_t> alive;  // node -> its alive key's create revision
  struct Joining {
    NodeInfo node;
    std::int64_t modRevision = 0;
  };
  std::map<std::string, Joining> joining;
  std::map<std::string, std::int64_t> left;  // node -> the exit code it left with
  // The newest round record seen: round/<r>.
  std::int64_t recordRound = 0;
  std::vector<NodeInfo> record;
  std::map<std::string, FailureRecord> failures;  // of round `state->round`, by node

  // Derived (recount() from scratch, then kept by each event):
  std::set<std::string> participants;     // of the state's round (running, or just ended)
  std::size_t joinedAlive = 0;            // joining and alive
  std::size_t participantsBack = 0;       // participants joining and alive
  std::set<std::string> expectedMissing;  // forming: the ended round's alive nodes not back yet
  std::string endReason;                  // running: why the round must end ("" none)
  std::int64_t minReachedAtMs = -1;       // forming: the policy's last call (when MIN joined)
  // Waiting nodes that replace a lost node of a fixed set (its id or node
  // rank): the coordinator takes those out of the state's `lost`.
  std::map<std::string, NodeInfo> replacing;
  // A fixed set of nodes (RoundState::fixedNodes): the members (of the
  // state's round, or waiting) whose alive key went without a leave, not in
  // the state's `lost` yet; and every node's address and node rank, to name
  // them.
  std::map<std::string, LostNode> lostNow;
  std::map<std::string, NodeInfo> known;

  bool running() const { return state && state->phase == Phase::kRunning; }
  bool forming() const { return state && state->phase == Phase::kForming; }

  // A joining key written after the running round started asks for a round.
  void noteJoin(const std::string& id) {
    if (!running() || !endReason.empty()) return;
    endReason =
        policy::endOnJoin(state->settings(), participants.size(), participants.contains(id), id);
  }

  void noteLost(const std::string& id) {
    if (!running() || !endReason.empty() || !participants.contains(id)) return;
    if (const auto why = lostReason(left, id)) endReason = policy::lostText(id, *why);
  }

  // A waiting node with a lost node's id or node rank (a fixed set's).
  void noteReplacing(const NodeInfo& node) {
    if (!state || state->lost.empty() || state->phase == Phase::kClosed) return;
    for (const auto& [id, lostNode] : state->lost) {
      if (id == node.id || (node.requestedRank >= 0 && lostNode.nodeRank == node.requestedRank)) {
        replacing[node.id] = node;
        return;
      }
    }
  }

  // Whether `id` counts in participantsBack.
  bool back(const std::string& id) const {
    return participants.contains(id) && joining.contains(id) && alive.contains(id);
  }

  // A member of a fixed set gone without a leave: it never returns.
  void noteLostMember(const std::string& id) {
    if (!state || state->fixedNodes == 0 || state->phase == Phase::kClosed) return;
    if (state->lost.contains(id) || lostNow.contains(id)) return;
    if (!participants.contains(id) && !joining.contains(id)) return;
    const auto why = lostReason(left, id);
    if (!why) return;
    const auto node = known.find(id);
    lostNow[id] = {node == known.end() ? "" : node->second.address,
                   node == known.end() ? -1 : node->second.requestedRank, *why};
  }

  void recount() {
    minReachedAtMs = -1;
    participants.clear();
    if (state && recordRound == state->round) {
      for (const auto& n : record) participants.insert(n.id);
    }
    // Those the state holds now are recorded; the round's members whose
    // keys went before this view (a new coordinator's) are found here.
    std::erase_if(lostNow, [&](const auto& entry) {
      return !state || state->phase == Phase::kClosed || state->lost.contains(entry.first);
    });
    for (const auto& id : participants) {
      if (!alive.contains(id)) noteLostMember(id);
    }
    joinedAlive = 0;
    participantsBack = 0;
    replacing.clear();
    for (const auto& [id, j] : joining) {
      joinedAlive += alive.contains(id) ? 1 : 0;
      participantsBack += back(id) ? 1 : 0;
      noteReplacing(j.node);
    }
    expectedMissing.clear();
    endReason.clear();
    if (forming()) {
      for (const auto& id : participants) {
        if (alive.contains(id) && !joining.contains(id)) expectedMissing.insert(id);
      }
    }
    if (running()) {
      for (const auto& id : participants) {
        if (!alive.contains(id)) noteLost(id);
      }
      for (const auto& [id, j] : joining) {
        if (j.modRevision > stateRevision) noteJoin(id);
      }
    }
  }

  // Applies one key's change; true when the state or the round changed
  // (then the caller recounts).
  bool apply(const std::string& base, const EtcdKeyValue& kv, bool deleted) {
    if (kv.key.compare(0, base.size(), base) != 0) return false;
    const std::string rest = kv.key.substr(base.size());
    const auto member = [&](std::string_view folder) -> std::optional<std::string> {
      if (rest.size() <= folder.size() || rest.compare(0, folder.size(), folder) != 0) {
        return std::nullopt;
      }
      return rest.substr(folder.size());
    };
    if (rest == "state") {
      if (!deleted && kv.modRevision <= stateRevision) return false;
      const std::int64_t round = state ? state->round : -1;
      auto next = deleted ? std::nullopt : stateFromJson(kv.value);
      if (!deleted && !next) return false;  // unreadable: not this ddprun's
      state = std::move(next);
      stateRevision = state ? kv.modRevision : 0;
      if (!state || state->round != round) failures.clear();  // they were the old round's
      return true;
    }
    if (auto id = member("alive/")) {
      if (deleted) {
        if (back(*id)) --participantsBack;
        if (alive.erase(*id) > 0 && joining.contains(*id)) --joinedAlive;
        expectedMissing.erase(*id);
        noteLost(*id);
        noteLostMember(*id);
      } else if (alive.emplace(*id, kv.createRevision).second) {
        if (joining.contains(*id)) ++joinedAlive;
        if (back(*id)) ++participantsBack;
        if (forming() && participants.contains(*id) && !joining.contains(*id)) {
          expectedMissing.insert(*id);
        }
      }
    } else if (auto joiner = member("joining/")) {
      if (deleted) {
        if (back(*joiner)) --participantsBack;
        replacing.erase(*joiner);
        if (joining.erase(*joiner) > 0 && alive.contains(*joiner)) --joinedAlive;
        if (forming() && participants.contains(*joiner) && alive.contains(*joiner)) {
          expectedMissing.insert(*joiner);
        }
      } else if (auto node = nodeFromJson(kv.value)) {
        node->id = *joiner;
        known[*joiner] = *node;
        const bool added = !joining.contains(*joiner);
        joining[*joiner] = {*node, kv.modRevision};
        if (added && alive.contains(*joiner)) ++joinedAlive;
        if (added && back(*joiner)) ++participantsBack;
        noteReplacing(*node);
        expectedMissing.erase(*joiner);
        noteJoin(*joiner);
      }
    } else if (auto gone = member("left/")) {
      if (deleted) {
        left.erase(*gone);
      } else {
        left[*gone] = leftExitCode(kv.value);
      }
    } else if (auto round = member("round/")) {
      if (deleted) return false;
      const std::int64_t r = std::stoll(*round);
      if (r < recordRound) return false;
      recordRound = r;
      record = participantsFromJson(kv.value);
      for (const auto& n : record) known[n.id] = n;
      return true;
    } else if (auto failure = member("failure/")) {
      // "<round>/<node>": only the state's round counts.
      const auto slash = failure->find('/');
      if (deleted || slash == std::string::npos || !state) return false;
      if (std::stoll(failure->substr(0, slash)) != state->round) return false;
      if (auto reported = failureFromJson(kv.value)) {
        failures[failure->substr(slash + 1)] = *reported;
      }
    }
    return false;
  }
};

struct EtcdCoordinator::Action {
  enum class Kind { kNone, kCreate, kReset, kUpdate, kPublish };
  Kind kind = Kind::kNone;
  RoundState next;                     // kUpdate, kPublish
  std::vector<NodeInfo> participants;  // kPublish
  std::string why;                     // for the log
  std::int64_t stateRevision = 0;      // the compare
  std::int64_t previousRound = 0;      // kPublish: its record goes
  std::int64_t oldJobLease = 0;        // kReset
  protocol::JoinRequest request;       // kCreate, kReset
};

EtcdCoordinator::EtcdCoordinator(CoordinatorOptions options, EtcdClient& client)
    : options_(std::move(options)), client_(client), view_(std::make_unique<CoordinatorView>()) {}

EtcdCoordinator::~EtcdCoordinator() {
  stop();
  if (watcher_.joinable()) watcher_.join();
}

void EtcdCoordinator::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (watch_) watch_->cancel();
  }
  changed_.notify_all();
}

void EtcdCoordinator::offer(const protocol::JoinRequest& request) {
  {
    std::lock_guard lock(mutex_);
    request_ = request;
    dirty_ = true;
  }
  changed_.notify_all();
}

void EtcdCoordinator::load() {
  // The watch first, from now (etcd tells it of each change at once), then
  // the read: the watch's events up to the read's revision are in it.
  auto watch = std::make_unique<EtcdWatch>(options_.etcd, options_.base, 0);
  EtcdWatch* started = watch.get();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw Error("the coordinator was stopped");
    watch_ = std::move(watch);
  }
  started->start();
  const EtcdRange range = client_.getPrefix(options_.base);
  auto view = std::make_unique<CoordinatorView>();
  // The state first: failure keys count only for its round.
  for (const auto& kv : range.kvs) {
    if (kv.key == options_.base + "state") view->apply(options_.base, kv, false);
  }
  for (const auto& kv : range.kvs) view->apply(options_.base, kv, false);
  view->revision = range.revision;
  view->recount();
  std::lock_guard lock(mutex_);
  view_ = std::move(view);
  loadedRevision_ = range.revision;
  dirty_ = true;
}

void EtcdCoordinator::runWatch() {
  RetryBackoff backoff(100ms, 2000ms);
  for (;;) {
    EtcdWatch* watch = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      watch = watch_.get();
    }
    std::vector<EtcdWatchEvent> events;
    try {
      events = watch->next();
      backoff.reset();
    } catch (const EtcdCompactedError&) {
      std::lock_guard lock(mutex_);
      reload_ = true;  // run() reads everything again and opens a new watch
      changed_.notify_all();
      return;
    } catch (const Error& e) {
      std::unique_lock lock(mutex_);
      if (stopping_) return;
      DDPRUN_WARN("The coordinator's etcd watch of rendezvous '{}' broke ({}); retrying.",
                  options_.rdzvId, e.what());
      changed_.wait_for(lock, backoff.next(), [this] { return stopping_; });
      continue;
    }
    if (options_.watchEvents != nullptr) *options_.watchEvents += events.size();
    {
      std::lock_guard lock(mutex_);
      bool recount = false;
      for (const auto& e : events) {
        if (e.kv.modRevision <= loadedRevision_) continue;  // in the view already
        recount = view_->apply(options_.base, e.kv, e.deleted) || recount;
        view_->revision = std::max(view_->revision, e.kv.modRevision);
      }
      if (recount) view_->recount();
      dirty_ = true;
    }
    changed_.notify_all();
  }
}

void EtcdCoordinator::run() {
  DDPRUN_INFO("Node {} coordinates rendezvous '{}' in etcd.", options_.nodeId, options_.rdzvId);
  // etcd unreachable for now: reading, reloading and writing are each tried
  // again with ddprun's back-off (250 ms doubling to 2 s, with jitter).
  RetryBackoff loadBackoff(250ms, 2000ms);
  RetryBackoff writeBackoff(250ms, 2000ms);
  for (;;) {
    try {
      load();
      loadBackoff.reset();
      break;
    } catch (const Error& e) {
      std::unique_lock lock(mutex_);
      if (stopping_) return;
      DDPRUN_WARN("The coordinator could not read rendezvous '{}' from etcd ({}); retrying.",
                  options_.rdzvId, e.what());
      changed_.wait_for(lock, loadBackoff.next(), [this] { return stopping_; });
    }
  }
  watcher_ = std::thread([this] { runWatch(); });
  for (;;) {
    Action action;
    {
      std::unique_lock lock(mutex_);
      auto wakeAt = Clock::time_point::max();
      for (;;) {
        if (stopping_) return;
        if (reload_) break;
        const bool seenOwn = view_->revision >= awaiting_;
        if (dirty_ && seenOwn) {
          dirty_ = false;
          wakeAt = Clock::time_point::max();
          action = decide(wakeAt);
          if (action.kind != Action::Kind::kNone) break;
        }
        if (wakeAt == Clock::time_point::max()) {
          changed_.wait(lock);
        } else if (changed_.wait_until(lock, wakeAt) == std::cv_status::timeout) {
          dirty_ = true;  // a timer: the last call or a cooldown ended
        }
      }
      if (reload_) {
        reload_ = false;
        lock.unlock();
        if (watcher_.joinable()) watcher_.join();
        try {
          load();
        } catch (const Error& e) {
          DDPRUN_WARN("Reloading rendezvous '{}' from etcd failed: {}", options_.rdzvId, e.what());
          std::unique_lock retry(mutex_);
          reload_ = true;  // again after a back-off, or at once on the stop
          changed_.wait_for(retry, loadBackoff.next(), [this] { return stopping_; });
          continue;
        }
        loadBackoff.reset();
        watcher_ = std::thread([this] { runWatch(); });
        continue;
      }
    }
    try {
      const bool coordinating = perform(action);
      writeBackoff.reset();
      if (!coordinating) {
        DDPRUN_INFO(
            "Node {} no longer coordinates rendezvous '{}': its alive key is gone (it left, or "
            "its etcd lease expired).",
            options_.nodeId, options_.rdzvId);
        return;
      }
    } catch (const Error& e) {
      // etcd unreachable for now: decide again on the next event or soon.
      DDPRUN_WARN("The coordinator of rendezvous '{}' could not write to etcd ({}); retrying.",
                  options_.rdzvId, e.what());
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, writeBackoff.next(), [this] { return stopping_; });
      dirty_ = true;
    }
  }
}

// --- deciding -----------------------------------------------------------------

EtcdCoordinator::Action EtcdCoordinator::decide(Clock::time_point& wakeAt) {
  CoordinatorView& v = *view_;
  Action action;
  action.stateRevision = v.stateRevision;
  const std::int64_t now = nowMs();
  const auto wakeAtMs = [&](std::int64_t ms) {
    wakeAt = std::min(
        wakeAt, Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(1, ms - now + 1)));
  };
  if (!v.state) {
    if (request_) {
      action.kind = Action::Kind::kCreate;
      action.request = *request_;
      action.why = "a new rendezvous";
    }
    return action;
  }
  const RoundState& s = *v.state;
  if (s.phase == Phase::kClosed) {
    // A failed job's leftover once no node of that job is alive: the nodes
    // alive now all came after it failed.
    const bool jobGone = std::none_of(v.alive.begin(), v.alive.end(),
                                      [&](const auto& a) { return a.second < v.stateRevision; });
    if (jobGone && request_) {
      action.kind = Action::Kind::kReset;
      action.request = *request_;
      action.oldJobLease = s.jobLease;
      action.why = "a failed job's state with none of its nodes left: starting anew";
    }
    return action;
  }
  if (!v.lostNow.empty()) {
    // Nodes of a fixed set (a Slurm step's) were lost: they never return,
    // so the job fails now if fewer than MIN are left (the c10d store's
    // rule and words); otherwise a round they ran in ends.
    action.kind = Action::Kind::kUpdate;
    action.next = loseNodes(s, v.lostNow, v.endReason, now);
    action.why = fmt::format("{} node(s) of a fixed set lost", v.lostNow.size());
    if (action.next.phase == Phase::kClosed) {
      DDPRUN_WARN(
          "Rendezvous '{}' is closed: the job lost {} of its fixed set of {} nodes, so fewer "
          "than its minimum of {} are left.",
          options_.rdzvId, action.next.lost.size(), s.fixedNodes, s.minNodes);
    }
    return action;
  }
  RoundState next = s;
  const policy::Settings settings = s.settings();
  // Waiting nodes that replace lost nodes of a fixed set: no longer lost.
  if (!v.replacing.empty()) {
    for (const auto& [id, node] : v.replacing) policy::releaseLost(next.lost, memberOf(node));
    v.replacing.clear();
    if (next.lost != s.lost) {
      action.kind = Action::Kind::kUpdate;
      action.next = next;
      action.why = "a lost node of the fixed set was replaced";
      return action;
    }
  }
  // Cooldowns that ended: the host may join again.
  if (!policy::readmit(next.hosts, now).empty()) {
    action.kind = Action::Kind::kUpdate;
    action.next = next;
    action.why = "a host's cooldown ended";
    return action;
  }
  if (const std::int64_t cooldown = policy::nextCooldownEnd(s.hosts); cooldown >= 0) {
    wakeAtMs(cooldown);
  }
  if (s.phase == Phase::kRunning) {
    if (!v.endReason.empty()) {
      action.kind = Action::Kind::kUpdate;
      action.next = endRound(s, v.endReason, now);
      action.why = v.endReason;
    }
    return action;
  }
  // Forming: the policy's readiness on the counts kept per event (O(1));
  // only a ready round costs a pass over the waiting nodes.
  const std::size_t expected = v.expectedMissing.size() + v.participantsBack;
  const policy::Readiness ready = policy::readiness(
      settings, {v.joinedAlive, expected, v.participantsBack}, v.minReachedAtMs, now);
  v.minReachedAtMs = ready.minReachedAtMs;
  if (!ready.ready) {
    if (ready.wakeAtMs >= 0) wakeAtMs(ready.wakeAtMs);
    return action;
  }
  policy::FormInput in;
  in.settings = settings;
  in.round = s.round;
  in.hosts = s.hosts;
  in.expected = expected;
  in.expectedBack = v.participantsBack;
  in.minReachedAtMs = v.minReachedAtMs;
  std::map<std::string, const NodeInfo*> byId;
  in.joining.reserve(v.joinedAlive);
  for (const auto& [id, j] : v.joining) {
    const auto alive = v.alive.find(id);
    if (alive == v.alive.end()) continue;
    in.joining.push_back(memberOf(j.node));
    in.joining.back().firstSeen = alive->second;  // arrival order: the alive key's creation
    byId[id] = &j.node;
  }
  if (s.round > 0 && s.attributedRound < s.round) {
    for (const auto& n : v.record) in.roundHosts.insert(n.address);
    for (const auto& [node, f] : v.failures)
      in.failures.push_back({node, f.address, f.failedAtMs, f.lostAPeer});
  }
  const policy::Formation f = policy::formRound(in, now);
  v.minReachedAtMs = f.minReachedAtMs;
  if (f.wakeAtMs >= 0) wakeAtMs(f.wakeAtMs);
  if (s.round > 0) next.attributedRound = s.round;
  if (f.attributed) next.hosts = f.hosts;
  if (f.attribution.exclusion) {
    DDPRUN_WARN("{}.", policy::exclusionText(options_.rdzvId, settings, *f.attribution.exclusion));
  } else if (f.attribution.stays) {
    DDPRUN_WARN("{}.", policy::staysText(options_.rdzvId, f.attribution.blamed,
                                         f.attribution.streak, s.minNodes));
  }
  if (!f.form) {
    if (next.attributedRound != s.attributedRound || next.hosts != s.hosts) {
      action.kind = Action::Kind::kUpdate;  // the attribution, at least
      action.next = next;
      action.why = "failures attributed";
    }
    return action;
  }
  action.kind = Action::Kind::kPublish;
  for (const auto& m : f.participants) {
    action.participants.push_back(*byId.at(m.id));
    action.participants.back().firstSeen = m.firstSeen;
  }
  action.next = startRound(next, action.participants, newPublishId());
  action.previousRound = s.round;
  action.why = fmt::format("round {} of {} nodes", action.next.round, action.participants.size());
  return action;
}

// --- writing ------------------------------------------------------------------

bool EtcdCoordinator::guardHolds() {
  const EtcdRange alive = client_.get(options_.base + "alive/" + options_.nodeId);
  return !alive.kvs.empty() && alive.kvs.front().createRevision == options_.aliveRevision;
}

bool EtcdCoordinator::perform(const Action& action) {
  const Keys keys{options_.base};
  const EtcdCompare guard{keys.alive(options_.nodeId), EtcdCompare::Target::kCreate,
                          options_.aliveRevision};
  const EtcdCompare stateIs{keys.state(), EtcdCompare::Target::kMod, action.stateRevision};
  EtcdTxnResult result;
  switch (action.kind) {
    case Action::Kind::kNone:
      return true;
    case Action::Kind::kCreate:
    case Action::Kind::kReset: {
      const std::int64_t lease = client_.grantLease(options_.jobTtl);
      const RoundState state = initialState(action.request, nowMs(), lease);
      std::vector<EtcdOp> ops{EtcdOp::put(keys.state(), toJson(state), lease)};
      for (const char* folder : {"round/", "assign/", "left/", "failure/"}) {
        const std::string prefix = options_.base + folder;
        ops.push_back(EtcdOp::erase(prefix, etcdPrefixEnd(prefix)));
      }
      result = client_.txn({guard, stateIs}, ops, {EtcdOp::read(keys.state())});
      // A failed compare after an attempt that etcd reported as timed out
      // and then carried out: the state is this one, on this lease.
      const bool ours = !result.succeeded && !result.ranges.empty() &&
                        !result.ranges.front().kvs.empty() &&
                        result.ranges.front().kvs.front().lease == lease;
      if (!result.succeeded && !ours) {
        client_.revokeLease(lease);
      } else if (action.oldJobLease != 0) {
        client_.revokeLease(action.oldJobLease);
      }
      break;
    }
    case Action::Kind::kUpdate:
      result = client_.txn({guard, stateIs},
                           {EtcdOp::put(keys.state(), toJson(action.next), action.next.jobLease)});
      break;
    case Action::Kind::kPublish: {
      // Each node's assign key first, then the state that makes them count:
      // a node reads its key only once the state names the round.
      const auto records = assignments(action.next, action.participants);
      for (std::size_t start = 0; start < records.size(); start += kOpsPerTxn) {
        std::vector<EtcdOp> ops;
        for (std::size_t i = start; i < std::min(records.size(), start + kOpsPerTxn); ++i) {
          ops.push_back(EtcdOp::put(keys.assign(action.participants[i].id), toJson(records[i]),
                                    action.next.jobLease));
        }
        if (!client_.txn({guard}, ops).succeeded) return guardHolds();
      }
      const std::string joining = options_.base + "joining/";
      const std::string failures = options_.base + "failure/";
      result =
          client_.txn({guard, stateIs},
                      {EtcdOp::put(keys.round(action.next.round),
                                   participantsToJson(action.participants), action.next.jobLease),
                       EtcdOp::put(keys.state(), toJson(action.next), action.next.jobLease),
                       EtcdOp::erase(joining, etcdPrefixEnd(joining)),
                       EtcdOp::erase(keys.round(action.previousRound)),
                       EtcdOp::erase(failures, etcdPrefixEnd(failures))});
      break;
    }
  }
  if (!result.succeeded) return guardHolds();  // the state moved: the watch brings it
  DDPRUN_DEBUG("Coordinator of rendezvous '{}': {} (revision {}).", options_.rdzvId, action.why,
               result.revision);
  std::lock_guard lock(mutex_);
  awaiting_ = std::max(awaiting_, result.revision);
  return true;
}

}  // namespace ddprun::rendezvous::etcd
