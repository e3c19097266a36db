#include "ddprun/agent/rounds/node_rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "ddprun/agent/rounds/free_port.h"
#include "ddprun/agent/rounds/join_progress.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/etcd_rendezvous.h"
#include "ddprun/rendezvous/rendezvous_client.h"

namespace ddprun::agent {

namespace asio = boost::asio;
namespace protocol = rendezvous::protocol;
using namespace std::chrono_literals;

namespace {

// True when `host` resolves to an address this machine can bind.
bool isLocalAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return false;
  bool local = false;
  for (addrinfo* a = list; a != nullptr && !local; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0 from getaddrinfo
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return local;
}

std::string numericAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0 || list == nullptr) return host;
  char buffer[NI_MAXHOST] = {};
  ::getnameinfo(list->ai_addr, list->ai_addrlen, buffer, sizeof(buffer), nullptr, 0,
                NI_NUMERICHOST);
  ::freeaddrinfo(list);
  return buffer;
}

}  // namespace

std::string anyAddressOfTheJobsFamily(const RendezvousConfig& r) {
  std::string host = !r.localAddr.empty() ? r.localAddr : r.endpointHost;
  if (host.empty() && !r.etcd.endpoints.empty()) {
    host = r.etcd.endpoints.front();  // "[h]:p" or "h:p"
  } else {
    host = numericAddress(host);  // a name may resolve to IPv6
  }
  const bool v6 = host.starts_with('[') || std::count(host.begin(), host.end(), ':') > 1;
  return v6 ? "::" : "0.0.0.0";
}

NodeRendezvous::NodeRendezvous(asio::io_context& io, RoundsSettings settings)
    : io_(io),
      settings_(std::move(settings)),
      rdzv_(settings_.rendezvous),
      endpoint_(hostPort(rdzv_.endpointHost, rdzv_.endpointPort)) {
  nodeId_ = fmt::format("{}:{}:{}", settings_.hostname, ::getpid(), randomToken().substr(0, 6));
  if (!settings_.useAgentStore) {
    masterPort_ = settings_.masterPort > 0 ? static_cast<std::uint16_t>(settings_.masterPort)
                                           : findFreePort();
  }
  if (rdzv_.backend == RendezvousBackendKind::kEtcd) {
    // No node hosts anything: the rounds live in etcd, and the workers'
    // store is group rank 0's (RendezvousRounds).
    endpoint_ = fmt::format("{}", fmt::join(rdzv_.etcd.endpoints, ","));
    where_ = "etcd at " + endpoint_;
    return;
  }
  where_ = "the rendezvous store at " + endpoint_;
  jobStore_ = {rdzv_.endpointHost, rdzv_.endpointPort};
  const bool staticHost = rdzv_.mode == RendezvousMode::kStatic && rdzv_.nodeRank == 0;
  const bool host = rdzv_.isHost.value_or(
      rdzv_.mode == RendezvousMode::kStatic ? staticHost : isLocalAddress(rdzv_.endpointHost));
  std::string why;
  if (host && !tryToHost(why)) {
    if (staticHost && !rdzv_.isHost) {
      // Another process holds node 0's port: waiting on it as a client
      // would only time out (or join a stranger's job).
      throw ConfigError(fmt::format(
          "--master_port={} is already in use on this node ({}); node 0 hosts the job's store "
          "there: stop whatever holds it or give every node another --master_port",
          rdzv_.endpointPort, why));
    }
    if (rdzv_.isHost.value_or(false)) {
      throw ConfigError(
          fmt::format("is_host=1 but the store cannot listen on {} ({})", endpoint_, why));
    }
  }
}

// Runs on the worker thread: connecting may take until the join timeout
// while the store comes up, and must not block the agent's loop (signals).
// The one place that picks the backend's implementation; everything else
// drives the RendezvousBackend interface.
void NodeRendezvous::connect() {
  if (client_) return;
  std::unique_ptr<rendezvous::RendezvousBackend> client;
  if (!jobStore_) {
    rendezvous::EtcdRendezvousOptions options;
    options.etcd = rdzv_.etcd;
    options.etcd.requestTimeout = std::min(rdzv_.requestTimeout, rdzv_.keepAliveInterval * 2);
    options.etcd.silenceLimit = rdzv_.keepAliveInterval * rdzv_.keepAliveMaxAttempts;
    options.rdzvId = settings_.runId;
    options.nodeId = nodeId_;
    const auto ttl = rdzv_.keepAliveInterval * rdzv_.keepAliveMaxAttempts;
    options.leaseTtl = std::chrono::ceil<std::chrono::seconds>(ttl);
    options.jobTtl = std::chrono::ceil<std::chrono::seconds>(rdzv_.jobTtl);
    options.connectTimeout = rdzv_.joinTimeout;  // join() reaches etcd first
    client = std::make_unique<rendezvous::EtcdRendezvous>(options);
  } else {
    client = connectStore();
  }
  {
    std::lock_guard lock(mutex_);
    client_ = std::move(client);
  }
  if (!jobStore_) {
    DDPRUN_INFO("Node {} keeps its rendezvous in {}.", nodeId_, where_);  // reached at join
  } else {
    DDPRUN_INFO("Node {} connected to {}{}.", nodeId_, where_, hosting() ? " (hosted here)" : "");
  }
  heartbeat_ = std::thread([this] { runHeartbeats(); });
  events_ = std::thread([this] { runEvents(); });
}

std::unique_ptr<rendezvous::RendezvousBackend> NodeRendezvous::connectStore() {
  rendezvous::StoreClientOptions options;
  options.host = rdzv_.endpointHost;
  options.port = rdzv_.endpointPort;
  options.token = rdzv_.token;
  options.name = nodeId_;
  options.connectTimeout = rdzv_.joinTimeout;
  options.requestTimeout = rdzv_.requestTimeout;
  options.silenceLimit = rdzv_.keepAliveInterval * rdzv_.keepAliveMaxAttempts;
  options.cancelConnect = &cancelled_;
  if (!rdzv_.localAddr.empty()) {
    if (isLocalAddress(rdzv_.localAddr)) {
      // The store sees this node at --local_addr, or says it cannot.
      options.sourceAddress = numericAddress(rdzv_.localAddr);
    } else {
      DDPRUN_WARN(
          "--local_addr {} is not an address of this host; the other nodes are told to reach "
          "this node there (right only behind NAT or a proxy).",
          rdzv_.localAddr);
    }
  }
  return std::make_unique<rendezvous::RendezvousClient>(options);
}

bool NodeRendezvous::tryToHost(std::string& why) {
  rendezvous::StoreServerOptions options;
  // Static: listen everywhere (master_addr may be a name), on IPv6 too when
  // master_addr is an IPv6 address; dynamic: on the endpoint's own address,
  // so several agents of one machine can race for it and the losers become
  // clients.
  options.host = rdzv_.mode == RendezvousMode::kStatic ? anyAddressOfTheJobsFamily(rdzv_)
                                                       : numericAddress(rdzv_.endpointHost);
  options.port = rdzv_.endpointPort;
  options.token = rdzv_.token;
  options.name = "ddprun-agent-store";
  // With node relays no PyTorch TCPStore client has any business here:
  // with a token, refused from every address, so between hosts only the
  // agents' authenticated protocol travels (docs/security.md; without a
  // token the store is open, as torchrun's).
  options.strict = settings_.strictStore || (settings_.relayWorkersStore && !rdzv_.token.empty());
  options.metricsPort = rdzv_.metricsPort;
  options.metricsHost = "0.0.0.0";
  try {
    server_ = std::make_unique<rendezvous::StoreServer>(options);
  } catch (const NetworkError& e) {
    DDPRUN_DEBUG("Not hosting the store: {}", e.what());
    why = e.what();
    return false;
  }
  server_->start();
  if (server_->metricsPort() != 0) {
    DDPRUN_INFO("The job's store serves metrics at http://0.0.0.0:{}/metrics.",
                server_->metricsPort());
  }
  return true;
}

NodeRendezvous::~NodeRendezvous() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cancelled_ = true;
    if (client_) client_->shutdown();  // unblocks the event and join threads
  }
  stopRequested_.notify_all();
  worker_.stop();  // calls not started yet never run
  worker_.join();  // may still be connecting: it sees cancelled_ within ~1 s
  {
    std::lock_guard lock(mutex_);
    if (client_) client_->shutdown();
  }
  for (std::thread* t : {&heartbeat_, &events_}) joinThread(*t);
  client_.reset();
  server_.reset();
}

std::string NodeRendezvous::withJoinAdvice(const std::string& timeout) const {
  return fmt::format(
      "{}; check that every node runs with the same --rdzv_id and --nnodes and can reach {}",
      timeout, endpoint_);
}

std::string NodeRendezvous::address() {
  if (!rdzv_.localAddr.empty()) return numericAddress(rdzv_.localAddr);
  std::lock_guard lock(mutex_);
  return client_ ? client_->localAddress() : "";
}

void NodeRendezvous::joinThread(std::thread& thread) {
  if (thread.joinable()) thread.join();
}

void NodeRendezvous::start(EventFn onEvent, LostFn onLost) {
  onEvent_ = std::move(onEvent);
  onLost_ = std::move(onLost);
}

void NodeRendezvous::runHeartbeats() {
  // The others count this node as lost after keep_alive_interval x
  // keep_alive_max_attempt without a heartbeat; a heartbeat unanswered for
  // that long means this node is cut off (or the store is gone), whatever
  // TCP says: the node stops rather than train in a round that has ended.
  const auto limit = rdzv_.keepAliveInterval * rdzv_.keepAliveMaxAttempts;
  auto confirmed = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stopRequested_.wait_for(lock, rdzv_.keepAliveInterval, [this] { return stopping_; })) {
    lock.unlock();
    std::string reason;
    try {
      // Each heartbeat gets at least one interval: after this process was
      // paused (SIGSTOP, a starved machine), the store, not the clock, says
      // whether this node is still a member. Under a silent network the
      // first unanswered heartbeat still fails at confirmed + limit.
      client_->keepAlive(
          std::max(confirmed + limit, std::chrono::steady_clock::now() + rdzv_.keepAliveInterval));
      confirmed = std::chrono::steady_clock::now();
    } catch (const TimeoutError&) {
      reason = fmt::format(
          "no heartbeat answered for {:.1f} s (keep_alive_interval {:.1f} s x "
          "keep_alive_max_attempt {}): this host's network to it is down, or its host is gone",
          std::chrono::duration<double>(limit).count(),
          std::chrono::duration<double>(rdzv_.keepAliveInterval).count(),
          rdzv_.keepAliveMaxAttempts);
    } catch (const Error& e) {
      reason = e.what();
    }
    lock.lock();
    if (!reason.empty()) {
      reportLost(reason);
      return;
    }
  }
}

void NodeRendezvous::reportLost(const std::string& reason) {
  if (stopping_ || lost_) return;
  // Nothing more is asked of a store that is gone or cut off: calls in
  // progress (a join, an event wait) end now, leave() and reportFailure()
  // return at once instead of waiting out the request timeout.
  lost_ = true;
  client_->shutdown();
  asio::post(io_, [this, what = fmt::format("lost {} ({})", where_, reason)] { onLost_(what); });
}

void NodeRendezvous::runEvents() {
  for (;;) {
    try {
      auto event = client_->waitEvent(std::chrono::milliseconds::max());
      if (event) asio::post(io_, [this, e = *event] { onEvent_(e); });
    } catch (const Error& e) {
      std::lock_guard lock(mutex_);
      reportLost(e.what());
      return;
    }
  }
}

void NodeRendezvous::asyncJoin(std::function<void(JoinResult)> done) {
  protocol::JoinRequest request;
  request.rdzvId = settings_.runId;
  request.nodeId = nodeId_;
  request.nodeRank = rdzv_.nodeRank;
  request.localWorldSize = static_cast<std::uint32_t>(settings_.nprocPerNode);
  request.minNodes = static_cast<std::uint32_t>(rdzv_.minNodes);
  request.maxNodes = static_cast<std::uint32_t>(rdzv_.maxNodes);
  request.lastCallMs = static_cast<std::uint32_t>(rdzv_.lastCallTimeout.count());
  request.keepAliveMs =
      static_cast<std::uint32_t>(rdzv_.keepAliveInterval.count() * rdzv_.keepAliveMaxAttempts);
  request.address = rdzv_.localAddr;
  request.masterPort = masterPort_;
  request.fixedNodes = static_cast<std::uint32_t>(std::max(0, rdzv_.fixedNodes));
  request.maxRestarts = settings_.maxRestarts;
  request.maxNodeFailures = static_cast<std::uint32_t>(rdzv_.maxNodeFailures);
  request.nodeCooldownMs = static_cast<std::uint32_t>(std::min<std::int64_t>(
      rdzv_.nodeCooldown.count(), std::numeric_limits<std::uint32_t>::max()));
  asio::post(worker_, [this, request, done = std::move(done)] {
    JoinResult result;
    bool connected = false;
    try {
      // Says what the wait is for until the round completes (or fails).
      JoinProgress progress(
          [this]() -> std::optional<protocol::RendezvousStatus> {
            rendezvous::RendezvousBackend* client = nullptr;
            {
              std::lock_guard lock(mutex_);
              client = client_.get();
            }
            if (client == nullptr) return std::nullopt;
            return client->status(settings_.runId);
          },
          endpoint_, JoinProgress::stderrIsTerminal(), rdzv_.progressInterval);
      connect();
      connected = true;
      progress.setDeadline(std::chrono::steady_clock::now() + rdzv_.joinTimeout);
      result.assignment = client_->join(request, rdzv_.joinTimeout);
      result.answered = true;
    } catch (const rendezvous::RendezvousClosedError& e) {
      result.closed = true;
      result.exitCode = e.exitCode();
      result.report = e.report();
      result.error = e.what();
      result.answered = true;
    } catch (const rendezvous::NodeExcludedError& e) {
      result.excluded = true;
      result.error = e.what();
      result.answered = true;
    } catch (const AnsweredTimeoutError& e) {
      result.error = withJoinAdvice(e.what());
      result.answered = true;
    } catch (const TimeoutError& e) {
      // Connecting explains itself; a round that never formed gets advice.
      result.error = !connected ? std::string(e.what()) : withJoinAdvice(e.what());
    } catch (const Error& e) {
      result.error = e.what();
    }
    asio::post(io_, [done, result] { done(result); });
  });
}

void NodeRendezvous::asyncReportFailure(const FailureNotice& failure,
                                        std::function<void(FailureAnswer)> done) {
  protocol::NodeReport r;
  r.rdzvId = settings_.runId;
  r.nodeId = nodeId_;
  r.round = failure.round;
  r.maxRestarts = settings_.maxRestarts;
  r.exitCode = failure.exitCode;
  r.report = failure.report;
  r.failedAtMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(failure.failedAt.time_since_epoch())
          .count();
  r.giveUp = failure.giveUp;
  r.lostAPeer = failure.lostAPeer;
  asio::post(worker_, [this, r, done = std::move(done)] {
    FailureAnswer answer;
    try {
      answer.decision = client_->reportFailure(r);
    } catch (const Error& e) {
      answer.error = e.what();
    }
    asio::post(io_, [done, answer] { done(answer); });
  });
}

void NodeRendezvous::asyncLeave(std::int64_t round, int exitCode, std::function<void()> done) {
  protocol::NodeReport r;
  r.rdzvId = settings_.runId;
  r.nodeId = nodeId_;
  r.round = round;
  r.exitCode = exitCode;
  asio::post(worker_, [this, r, done = std::move(done)] {
    if (client_ && !lost_) {  // a lost store is not asked
      try {
        client_->leave(r);
      } catch (const Error& e) {
        DDPRUN_WARN("Node {} could not leave the rendezvous cleanly: {}", nodeId_, e.what());
      }
    }
    asio::post(io_, done);
  });
}

void NodeRendezvous::publishNodeCounters(protocol::NodeCounters kind, std::string text) {
  asio::post(worker_, [this, kind, text = std::move(text)] {
    if (!client_ || lost_) return;
    try {
      client_->publishNodeCounters(kind, settings_.runId, nodeId_, text);
    } catch (const Error& e) {
      DDPRUN_DEBUG("Node {} could not publish its counters: {}", nodeId_, e.what());
    }
  });
}

void NodeRendezvous::asyncWaitUntilAllLeft(std::function<void()> done) {
  asio::post(worker_, [this, done = std::move(done)] {
    try {
      if (client_ && !lost_) client_->waitUntilAllLeft(settings_.runId, rdzv_.closeTimeout);
    } catch (const Error& e) {
      DDPRUN_WARN("Not every node left the rendezvous within the close timeout: {}", e.what());
    }
    asio::post(io_, done);
  });
}

}  // namespace ddprun::agent
