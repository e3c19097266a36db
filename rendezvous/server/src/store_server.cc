#include "ddprun/rendezvous/store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <thread>
#include <vector>

#include <cerrno>
#include <cstring>

#include "awaitable.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/retry_backoff.h"
#include "ddprun/common/tcp_liveness.h"
#include "ddprun/rendezvous/metrics_endpoint.h"
#include "rendezvous_manager.h"
#include "server_context.h"
#include "store_metrics.h"
#include "transport.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Set once on the listener: every accepted connection inherits them (Linux
// copies a listener's socket options into each connection it accepts), so
// a connection costs one accept4 instead of seven more system calls each.
void configureListener(tcp::acceptor& acceptor, const StoreServerOptions& options) {
  boost::system::error_code ignored;
  acceptor.set_option(tcp::no_delay(true), ignored);
  setTcpLiveness(acceptor.native_handle(), options.keepAliveIdle, options.keepAliveInterval,
                 options.keepAliveCount);
}

}  // namespace

struct StoreServer::Impl {
  explicit Impl(StoreServerOptions options)
      : context(std::move(options)),
        io(1),
        acceptor(io),
        retryTimer(io),
        rendezvous(std::make_unique<RendezvousManager>(io.get_executor(), context.state)) {
    context.rendezvous = rendezvous.get();
  }
  ~Impl() { context.rendezvous = nullptr; }

  asio::awaitable<void> listen();
  // One connection from the listen backlog, admitted and served.
  enum class AcceptResult { kTaken, kEmpty, kBackOff };
  AcceptResult acceptOne();
  // Turns context.pauses every LoopPauses::kTick while the server runs.
  asio::awaitable<void> tick();
  void shutdown();

  // Declared before `io` so that connections destroyed with the io_context can
  // still unregister from the context.
  ServerContext context;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer retryTimer;
  asio::steady_timer tickTimer{io};
  // Declared after `io`: its timers must go before the io_context does.
  std::unique_ptr<RendezvousManager> rendezvous;
  std::unique_ptr<MetricsEndpoint> metrics;
  std::uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopped{false};
};

namespace {

constexpr int kListenBacklog = 65535;

// Connections accepted in one turn of the loop at most.
constexpr int kAcceptBatch = 256;

// The youngest connection that may be shed to make room: when too many owe
// their handshake, a second, so that a store short of CPU while thousands
// of agents connect at once still reads their handshakes before it would
// shed any of them (the others wait in the listen backlog meanwhile); when
// the descriptors run out, 100 ms: a real client must get one.
constexpr std::chrono::milliseconds kShedMinAge{1000};
constexpr std::chrono::milliseconds kShedMinAgeOutOfDescriptors{100};

// Closes the connection that has waited longest without proving itself, so
// that a flood of idle or half-open connections cannot starve real clients.
// Only connections older than `minAge` are shed: a burst of real clients
// (thousands of workers connecting at once) must not lose the ones whose
// handshake the server has simply not read yet. Returns false when no
// unproven connection is that old.
bool shedOldestUnproven(ServerContext& context, const char* why,
                        std::chrono::steady_clock::duration minAge) {
  Transport* oldest = nullptr;
  for (Transport* connection : context.connections) {
    if (!connection->proven() && (oldest == nullptr || connection->started() < oldest->started())) {
      oldest = connection;
    }
  }
  if (oldest == nullptr || std::chrono::steady_clock::now() - oldest->started() < minAge) {
    return false;
  }
  context.rejectedLog.warn(
      fmt::format("Closing the connection of {}, which has not proven itself, to make room ({}).",
                  oldest->peer(), why));
  oldest->close("the server made room for other clients");
  return true;
}

}  // namespace

asio::awaitable<void> StoreServer::Impl::listen() {
  // After an error (out of descriptors, most often): waits that double from
  // 10 ms to 1 s with jitter, reset by the next connection taken.
  RetryBackoff backoff;
  while (!stopped) {
    // Too many connections still owe their handshake: shed the oldest of
    // them if it is old enough, else leave new ones in the listen backlog
    // for a moment (the kernel holds them; nothing is refused).
    while (!stopped && context.unproven >= context.options.maxUnproven &&
           !shedOldestUnproven(context, "too many connections have not proven themselves",
                               kShedMinAge)) {
      retryTimer.expires_after(std::chrono::milliseconds(10));
      co_await retryTimer.async_wait(kAwait);
    }
    if (stopped) co_return;
    auto [ec] = co_await acceptor.async_wait(tcp::acceptor::wait_read, kAwait);
    if (ec) {
      if (ec == asio::error::operation_aborted || stopped) co_return;
      context.rejectedLog.warn(
          fmt::format("The store server could not wait for connections: {}.", ec.message()));
      retryTimer.expires_after(backoff.next());
      co_await retryTimer.async_wait(kAwait);
      continue;
    }
    // Thousands of agents connect at once: take what the backlog holds, up
    // to a batch, in one turn of the loop (the next wait ends at once when
    // more are there, after the handlers that are ready meanwhile).
    for (int taken = 0;
         taken < kAcceptBatch && !stopped && context.unproven < context.options.maxUnproven;
         ++taken) {
      const AcceptResult accepted = acceptOne();
      if (accepted == AcceptResult::kEmpty) break;
      if (accepted == AcceptResult::kBackOff) {
        retryTimer.expires_after(backoff.next());
        co_await retryTimer.async_wait(kAwait);
        break;
      }
      backoff.reset();
    }
  }
}

StoreServer::Impl::AcceptResult StoreServer::Impl::acceptOne() {
  sockaddr_storage peer{};
  socklen_t peerLength = sizeof(peer);
  // Close-on-exec (never inherited by spawned workers) and non-blocking
  // from the start; the TCP options come from the listener.
  const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&peer),
                           &peerLength, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return AcceptResult::kEmpty;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) return AcceptResult::kTaken;
    if ((error == EMFILE || error == ENFILE) &&
        shedOldestUnproven(context, "out of file descriptors", kShedMinAgeOutOfDescriptors)) {
      return AcceptResult::kTaken;  // a descriptor is free again: accept at once
    }
    // Out of descriptors with nothing to shed, or another error: back off
    // a little instead of spinning on a listener that stays readable.
    context.rejectedLog.warn(
        fmt::format("The store server could not accept a connection: {}.", std::strerror(error)));
    return AcceptResult::kBackOff;
  }
  tcp::endpoint remote;
  std::string address;
  if (peerLength <= remote.capacity() &&
      (peer.ss_family == AF_INET || peer.ss_family == AF_INET6)) {
    std::memcpy(remote.data(), &peer, peerLength);
    remote.resize(peerLength);
    address = remote.address().to_string();
  } else {
    remote = {};
  }
  // One lookup: the address charged here is the one the Transport gives
  // back when it closes.
  if (!context.budget.admit(address)) {
    context.counters.rejected++;
    context.rejectedLog.warn(fmt::format(
        "Refused a connection from {}: the server holds {} connections (limit {}), at most {} "
        "from one address.",
        address, context.budget.connections(), context.options.maxConnections,
        context.options.maxConnectionsPerAddress));
    ::close(fd);
    return AcceptResult::kTaken;
  }
  tcp::socket socket(io);
  boost::system::error_code ec;
  socket.assign(remote.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    context.budget.leave(address);
    context.rejectedLog.warn(fmt::format(
        "The store server could not take the connection of {}: {}.", address, ec.message()));
    return AcceptResult::kTaken;
  }
  auto connection = std::make_shared<Transport>(std::move(socket), remote, context);
  asio::co_spawn(io, connection->run(), asio::detached);
  return AcceptResult::kTaken;
}

asio::awaitable<void> StoreServer::Impl::tick() {
  while (!stopped) {
    tickTimer.expires_after(LoopPauses::kTick);
    auto [ec] = co_await tickTimer.async_wait(kAwait);
    if (ec || stopped) co_return;
    context.pauses.turn(std::chrono::steady_clock::now());
  }
}

void StoreServer::Impl::shutdown() {
  boost::system::error_code ignored;
  acceptor.close(ignored);
  retryTimer.cancel();
  tickTimer.cancel();
  if (metrics) metrics->close();
  // close() unregisters, so iterate over a copy.
  std::vector<Transport*> open(context.connections.begin(), context.connections.end());
  for (Transport* connection : open) connection->close();
  io.stop();
}

StoreServer::StoreServer(StoreServerOptions options) {
  if (options.token.empty() && options.strict) {
    throw ConfigError(
        "a strict store needs a token (with none it serves every client anyway); set "
        "DDPRUN_TOKEN or pass a token file");
  }
  impl_ = std::make_unique<Impl>(std::move(options));
  const auto& opts = impl_->context.options;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(opts.host, ec);
  if (ec) {
    throw ConfigError(
        fmt::format("'{}' is not an IP address to listen on; give an address "
                    "such as 0.0.0.0 or 127.0.0.1",
                    opts.host));
  }
  const tcp::endpoint endpoint(address, opts.port);
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  // As deep a backlog as the kernel allows (it caps this at
  // net.core.somaxconn): thousands of agents connect at the same moment
  // (docs/operations.md, "Thousands of nodes").
  if (!ec) acceptor.listen(kListenBacklog, ec);
  if (ec) {
    throw NetworkError(fmt::format(
        "the store server cannot listen on {}:{}: {}{}", opts.host, opts.port, ec.message(),
        ec == asio::error::address_in_use ? "; choose another port or stop the process using it"
                                          : ""));
  }
  // Asio does not set close-on-exec; a worker must not inherit the listener.
  ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  acceptor.non_blocking(true, ec);  // accept4 returns when the backlog is empty
  configureListener(acceptor, opts);
  impl_->port = acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->listen(), asio::detached);
  asio::co_spawn(impl_->io, impl_->tick(), asio::detached);
  if (opts.metricsPort >= 0) {
    Impl* impl = impl_.get();
    impl->metrics = std::make_unique<MetricsEndpoint>(
        impl->io, opts.metricsHost.empty() ? opts.host : opts.metricsHost,
        static_cast<std::uint16_t>(opts.metricsPort),
        [impl] { return renderMetrics(impl->context, impl->rendezvous.get()); });
  }
}

std::uint16_t StoreServer::metricsPort() const {
  return impl_->metrics ? impl_->metrics->port() : 0;
}

StoreServer::~StoreServer() { stop(); }

std::uint16_t StoreServer::port() const { return impl_->port; }
const std::string& StoreServer::host() const { return impl_->context.options.host; }

void StoreServer::start() {
  impl_->thread = std::thread([this] { run(); });
}

void StoreServer::run() {
  const auto level = impl_->context.options.quiet ? spdlog::level::debug : spdlog::level::info;
  spdlog::log(level, "The store server {} is listening on {}:{}.", impl_->context.options.name,
              impl_->context.options.host, impl_->port);
  impl_->io.run();
  spdlog::log(level, "The store server {} on port {} has stopped.", impl_->context.options.name,
              impl_->port);
}

void StoreServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->shutdown(); });
  if (impl_->thread.joinable()) impl_->thread.join();
}

StoreServerStats StoreServer::stats() const {
  const auto& c = impl_->context.counters;
  return {c.accepted.load(), c.rejected.load(), c.active.load(), c.requests.load(),
          c.waiters.load()};
}

}  // namespace ddprun::rendezvous
