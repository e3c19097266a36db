#include "ddprun/rendezvous/node_relay.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <stdexcept>

#include "ddprun/common/logging.h"
#include "ddprun/common/node_telemetry.h"
#include "shared_requests.h"
#include "upstream.h"
#include "worker_connection.h"

namespace ddprun::rendezvous {

std::chrono::microseconds relayConnectSpread(std::uint32_t nodes) {
  return std::chrono::microseconds(100) * nodes;
}

namespace asio = boost::asio;
using asio::ip::tcp;
using relay::RelayContext;
using relay::Upstream;
using relay::WorkerConnection;

class NodeRelay::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, RelayOptions options,
       std::function<void(const std::string&)> onUpstreamLost)
      : io_(io), acceptor_(io), onUpstreamLost_(std::move(onUpstreamLost)) {
    context_.options = std::move(options);
    const auto& o = context_.options;
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(o.listenHost, ec);
    if (ec) {
      throw std::runtime_error(
          fmt::format("the node relay cannot listen on '{}': not an IP address", o.listenHost));
    }
    const tcp::endpoint endpoint(address, o.listenPort);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(o.listenBacklog, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("the node relay cannot listen on {}:{}: {}",
                                           o.listenHost, o.listenPort, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
  }

  void start(std::function<void()> onReady) {
    const auto& o = context_.options;
    Upstream::Options upstream;
    upstream.host = o.upstreamHost;
    upstream.port = o.upstreamPort;
    upstream.token = o.token;
    upstream.name = o.name;
    upstream.sourceHost = o.sourceHost;
    upstream.maxFrameBytes = o.limits.maxFrameBytes;
    upstream.connectTimeout = o.connectTimeout;
    upstream.connectSpread = o.connectSpread;
    std::weak_ptr<Impl> weak = weak_from_this();
    upstream_ = std::make_shared<Upstream>(io_.get_executor(), std::move(upstream),
                                           [weak](const std::string& reason) {
                                             if (auto self = weak.lock())
                                               self->upstreamLost(reason);
                                           });
    context_.shared = std::make_shared<relay::SharedRequests>(upstream_, context_.counters,
                                                              context_.options.addWindow);
    upstream_->start(std::move(onReady));
    accept();
    if (context_.options.reportEvery.count() > 0 && context_.options.onReport) report();
  }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    closeAll("the node relay stops");
    if (upstream_) upstream_->close("the node relay stops");
    reportTimer_.cancel();
    if (context_.options.onReport) context_.options.onReport(context_.counters);
  }

  std::uint16_t port() const { return port_; }
  const RelayCounters& counters() const { return context_.counters; }

 private:
  void report() {
    reportTimer_.expires_after(context_.options.reportEvery);
    reportTimer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->stopped_) return;
      self->context_.options.onReport(self->context_.counters);
      self->report();
    });
  }

  void accept() {
    acceptor_.async_accept(
        [self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
          if (self->stopped_) return;
          if (!ec) {
            std::make_shared<WorkerConnection>(std::move(socket), self->context_)->start();
          } else if (ec == asio::error::operation_aborted) {
            return;
          }
          // Other errors (a descriptor limit) do not stop the door.
          self->accept();
        });
  }

  void closeAll(const std::string& why) {
    auto open = std::move(context_.open);
    context_.open.clear();
    for (auto& [id, weak] : open) {
      if (auto connection = weak.lock()) connection->close(why);
    }
  }

  void upstreamLost(const std::string& reason) {
    closeAll(fmt::format("the node relay lost the store: {}", reason));
    if (onUpstreamLost_) onUpstreamLost_(reason);
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  asio::steady_timer reportTimer_{io_};
  std::function<void(const std::string&)> onUpstreamLost_;
  RelayContext context_;
  std::shared_ptr<Upstream> upstream_;
  std::uint16_t port_ = 0;
  bool stopped_ = false;
};

std::string countersText(const RelayCounters& c) {
  return telemetry::encodeCounters(telemetry::RelayTotals{c.connectionsOpen, c.requests,
                                                          c.upstreamRequests, c.coalesced,
                                                          c.addsCombined, c.bytesSaved});
}

NodeRelay::NodeRelay(asio::io_context& io, RelayOptions options,
                     std::function<void(const std::string&)> onUpstreamLost)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(onUpstreamLost))) {}

NodeRelay::~NodeRelay() { impl_->stop(); }

void NodeRelay::start(std::function<void()> onReady) { impl_->start(std::move(onReady)); }
void NodeRelay::stop() { impl_->stop(); }
std::uint16_t NodeRelay::port() const { return impl_->port(); }
const RelayCounters& NodeRelay::counters() const { return impl_->counters(); }

}  // namespace ddprun::rendezvous
