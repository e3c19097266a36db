// MetricsEndpoint: a Prometheus endpoint (GET /metrics, text format 0.0.4)
// on its own port, served on the loop it is given so the text is rendered
// from live state without locks: the store server's (its state), and a
// single node's agent's (its downtime). docs/operations.md lists the
// metrics. Also how the nodes' counters (protocol::NodeCounters) read as
// metrics, the one rendering of both.
//
// Bounded like everything else a client reaches: at most kMaxOpen
// connections at once (more wait in the listen backlog), a request header
// of at most 8 KiB, 5 s per request; one request per connection.
//
// Thread-safety: the server's loop thread only.
// Ownership: owns its acceptor; close() before the io_context goes.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ddprun/common/node_telemetry.h"

namespace ddprun::rendezvous {

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;
  static constexpr std::size_t kMaxOpen = 16;

  // Binds host:port (0: any free port) at once; throws NetworkError.
  MetricsEndpoint(boost::asio::io_context& io, const std::string& host, std::uint16_t port,
                  Render render);
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  std::uint16_t port() const { return port_; }
  void close();

 private:
  boost::asio::awaitable<void> listen();
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  Render render_;
  std::uint16_t port_ = 0;
  std::size_t open_ = 0;
  bool closed_ = false;
};

// One node's downtime, as its agent published it.
struct NodeDowntime {
  std::string rdzvId;
  std::string node;
  telemetry::DowntimeCounters counters;
};
// The downtime metrics of `nodes` (ddprun_incidents_total, ..., the phase
// histograms) in Prometheus text format; "" for none.
std::string downtimeMetrics(const std::vector<NodeDowntime>& nodes);

}  // namespace ddprun::rendezvous
