#include "ddprun/rendezvous/metrics_endpoint.h"

#include <fcntl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <fmt/format.h>

#include <map>
#include <vector>

#include "awaitable.h"
#include "ddprun/common/error.h"
#include "ddprun/common/retry_backoff.h"
#include "rendezvous_manager.h"
#include "server_context.h"
#include "store_metrics.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, const std::string& host, std::uint16_t port,
                                 Render render)
    : io_(io), acceptor_(io), render_(std::move(render)) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) {
    throw ConfigError(fmt::format("'{}' is not an IP address for the metrics endpoint", host));
  }
  const tcp::endpoint endpoint(address, port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw NetworkError(
        fmt::format("the metrics endpoint cannot listen on {}:{}: {}", host, port, ec.message()));
  }
  ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, listen(), asio::detached);
}

void MetricsEndpoint::close() {
  closed_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

asio::awaitable<void> MetricsEndpoint::listen() {
  asio::steady_timer pause(io_);
  RetryBackoff backoff;  // after an accept error: out of descriptors, most often
  while (!closed_) {
    if (open_ >= kMaxOpen) {  // the rest wait in the backlog
      pause.expires_after(std::chrono::milliseconds(10));
      co_await pause.async_wait(kAwait);
      continue;
    }
    auto [ec, socket] = co_await acceptor_.async_accept(kAwait);
    if (ec) {
      if (closed_ || ec == asio::error::operation_aborted) co_return;
      pause.expires_after(backoff.next());
      co_await pause.async_wait(kAwait);
      continue;
    }
    backoff.reset();
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    ++open_;
    asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> MetricsEndpoint::serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  stream.expires_after(std::chrono::seconds(5));
  beast::flat_buffer buffer(8 * 1024);
  http::request_parser<http::empty_body> parser;
  parser.header_limit(8 * 1024);
  auto [readError, ignoredBytes] = co_await http::async_read(stream, buffer, parser, kAwait);
  if (!readError) {
    const auto& request = parser.get();
    http::response<http::string_body> response;
    response.version(request.version());
    response.keep_alive(false);
    const std::string_view target = request.target();
    if (request.method() == http::verb::get &&
        (target == "/metrics" || target.starts_with("/metrics?"))) {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      response.body() = render_();
    } else {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "ddprun serves GET /metrics (Prometheus text format) here\n";
    }
    response.prepare_payload();
    co_await http::async_write(stream, response, kAwait);
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  --open_;
}

namespace {

// A label value in the text format: \, " and newline escaped.
std::string label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Text {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, const std::string& labels, std::uint64_t value) {
    out_ += labels.empty() ? fmt::format("{} {}\n", name, value)
                           : fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  void sample(const char* name, const std::string& labels, double value) {
    out_ += labels.empty() ? fmt::format("{} {}\n", name, value)
                           : fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string nodeLabels(const std::string& rdzvId, const std::string& node) {
  return fmt::format("rdzv_id=\"{}\",node=\"{}\"", label(rdzvId), label(node));
}

// The counters texts agents keep under protocol::nodeCountersKey(kind, ...),
// one node at a time: fn(rdzvId, node, text).
template <typename Fn>
void forEachNode(const StoreState& state, protocol::NodeCounters kind, Fn&& fn) {
  const std::string_view prefix = protocol::nodeCountersPrefix(kind);
  for (const auto& key : state.keys()) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string_view rest = std::string_view(key).substr(prefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) continue;
    fn(std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)), *state.find(key));
  }
}

// The node relays' counters: ddprun_relay_<name>{rdzv_id, node}.
void relayCounters(const StoreState& state, Text& t) {
  std::map<std::string, std::vector<std::pair<std::string, std::uint64_t>>> byName;
  forEachNode(state, protocol::NodeCounters::kRelay,
              [&byName](const std::string& rdzvId, const std::string& node, std::string_view text) {
                const auto relay = telemetry::decodeRelayCounters(text);
                if (!relay) return;
                for (const auto& [name, value] : telemetry::namedTotals(*relay)) {
                  byName[std::string("ddprun_relay_") + name].emplace_back(nodeLabels(rdzvId, node),
                                                                           value);
                }
              });
  for (const auto& [name, samples] : byName) {
    t.family(name.c_str(), name == "ddprun_relay_connections" ? "gauge" : "counter",
             "A node relay's counter, as its agent last published it (docs/operations.md).");
    for (const auto& [labels, value] : samples) t.sample(name.c_str(), labels, value);
  }
}

std::vector<NodeDowntime> nodeDowntimes(const StoreState& state) {
  std::vector<NodeDowntime> out;
  forEachNode(state, protocol::NodeCounters::kDowntime,
              [&out](const std::string& rdzvId, const std::string& node, std::string_view text) {
                if (auto counters = telemetry::decodeDowntimeCounters(text)) {
                  out.push_back({rdzvId, node, *counters});
                }
              });
  return out;
}

// Each node's downtime, as its agent last published it (docs/operations.md,
// "Downtime, phase by phase"): incidents, seconds lost and training, the
// goodput, and a histogram of each phase's seconds.
void downtimeCounters(const std::vector<NodeDowntime>& nodes, Text& t) {
  if (nodes.empty()) return;
  const auto seconds = [](std::uint64_t ms) { return static_cast<double>(ms) / 1000.0; };
  const auto labels = [](const NodeDowntime& node) { return nodeLabels(node.rdzvId, node.node); };
  t.family("ddprun_incidents_total", "counter",
           "Incidents of a node: an attempt failed (the start not counted).");
  for (const auto& node : nodes) {
    t.sample("ddprun_incidents_total", labels(node), node.counters.incidents);
  }
  t.family("ddprun_lost_seconds_total", "counter",
           "Seconds a node's incidents cost: each from the failure to training again.");
  for (const auto& node : nodes) {
    t.sample("ddprun_lost_seconds_total", labels(node), seconds(node.counters.lostMs));
  }
  t.family("ddprun_training_seconds_total", "counter",
           "Seconds a node's workers trained (from each attempt's first step).");
  for (const auto& node : nodes) {
    t.sample("ddprun_training_seconds_total", labels(node), seconds(node.counters.trainingMs));
  }
  t.family("ddprun_goodput", "gauge",
           "Time training over the time since the node's start (none until a step was seen).");
  for (const auto& node : nodes) {
    if (const auto goodput = node.counters.goodput()) {
      t.sample("ddprun_goodput", labels(node), *goodput);
    }
  }
  std::string phases;
  for (telemetry::Phase phase : telemetry::kPhases) {
    phases += (phases.empty() ? "" : ", ") + std::string(telemetry::phaseName(phase));
  }
  t.family("ddprun_incident_phase_seconds", "histogram",
           fmt::format("Seconds of each phase of a node's incidents ({}).", phases).c_str());
  for (const auto& node : nodes) {
    for (telemetry::Phase phase : telemetry::kPhases) {
      const telemetry::PhaseHistogram& h = node.counters.phases[telemetry::index(phase)];
      const std::string phaseLabels =
          fmt::format("{},phase=\"{}\"", labels(node), telemetry::phaseName(phase));
      for (std::size_t i = 0; i < h.buckets.size(); ++i) {
        const std::string le = i < telemetry::kBucketsMs.size()
                                   ? fmt::format("{}", seconds(telemetry::kBucketsMs[i]))
                                   : std::string("+Inf");
        t.sample("ddprun_incident_phase_seconds_bucket",
                 fmt::format("{},le=\"{}\"", phaseLabels, le), h.buckets[i]);
      }
      t.sample("ddprun_incident_phase_seconds_sum", phaseLabels, seconds(h.sumMs));
      t.sample("ddprun_incident_phase_seconds_count", phaseLabels, h.count);
    }
  }
}

}  // namespace

std::string downtimeMetrics(const std::vector<NodeDowntime>& nodes) {
  Text t;
  downtimeCounters(nodes, t);
  return t.take();
}

std::string renderMetrics(const ServerContext& c, const RendezvousManager* rendezvous) {
  Text t;
  const auto& m = c.metrics;
  t.family("ddprun_store_connections", "gauge", "Connections open now, by dialect.");
  t.sample("ddprun_store_connections", "dialect=\"native\"", m.nativeConnections);
  t.sample("ddprun_store_connections", "dialect=\"tcpstore\"", m.tcpstoreConnections);
  t.family("ddprun_store_connections_by_address", "gauge",
           "Connections open now, by the peer's address (one node: its agent, its relay).");
  for (const auto& [address, count] : c.budget.connectionsByAddress()) {
    t.sample("ddprun_store_connections_by_address", fmt::format("address=\"{}\"", label(address)),
             count);
  }
  t.family("ddprun_store_connections_accepted_total", "counter", "Connections accepted.");
  t.sample("ddprun_store_connections_accepted_total", "", c.counters.accepted.load());
  t.family("ddprun_store_clients_rejected_total", "counter",
           "Clients refused: over a connection cap, failed authentication, a bad first request.");
  t.sample("ddprun_store_clients_rejected_total", "", c.counters.rejected.load());
  t.family("ddprun_store_operations_total", "counter", "Requests handled, by dialect and type.");
  for (const auto& [op, n] : m.nativeOperations) {
    t.sample("ddprun_store_operations_total", fmt::format("dialect=\"native\",op=\"{}\"", op), n);
  }
  for (const auto& [op, n] : m.tcpstoreOperations) {
    t.sample("ddprun_store_operations_total", fmt::format("dialect=\"tcpstore\",op=\"{}\"", op), n);
  }
  t.family("ddprun_store_received_bytes_total", "counter", "Bytes read from clients.");
  t.sample("ddprun_store_received_bytes_total", "", m.bytesReceived);
  t.family("ddprun_store_sent_bytes_total", "counter", "Bytes written to clients.");
  t.sample("ddprun_store_sent_bytes_total", "", m.bytesSent);
  t.family("ddprun_store_waits", "gauge",
           "Blocking requests (GET, WAIT, MULTI_GET; TCPStore WAIT, BARRIER) pending now.");
  t.sample("ddprun_store_waits", "", c.state.numWaiters());
  t.family("ddprun_store_data_bytes", "gauge", "Keys and values held, and the limit.");
  t.sample("ddprun_store_data_bytes", "kind=\"used\"", c.state.totalBytes());
  t.sample("ddprun_store_data_bytes", "kind=\"limit\"", c.options.maxTotalBytes);
  t.family("ddprun_store_buffered_bytes", "gauge",
           "The memory budget beyond the data (input, replies, waits): used and limit.");
  t.sample("ddprun_store_buffered_bytes", "kind=\"used\"", c.budget.used());
  t.sample("ddprun_store_buffered_bytes", "kind=\"limit\"", c.budget.limit());
  relayCounters(c.state, t);
  downtimeCounters(nodeDowntimes(c.state), t);
  if (rendezvous == nullptr) return t.take();
  const auto all = rendezvous->summaries();
  const auto each = [&](const char* name, const char* type, const char* help, auto value) {
    t.family(name, type, help);
    for (const auto& r : all) {
      t.sample(name, fmt::format("rdzv_id=\"{}\"", label(r.id)),
               static_cast<std::uint64_t>(std::max<std::int64_t>(0, value(r))));
    }
  };
  using S = RendezvousManager::Summary;
  each("ddprun_rendezvous_rounds_total", "counter", "Rounds completed.",
       [](const S& r) { return r.round; });
  each("ddprun_rendezvous_running", "gauge", "1 while a round runs.",
       [](const S& r) { return r.running ? 1 : 0; });
  each("ddprun_rendezvous_closed", "gauge", "1 once the job failed (no restarts left).",
       [](const S& r) { return r.closed ? 1 : 0; });
  each("ddprun_rendezvous_members", "gauge", "Nodes in the running round.",
       [](const S& r) { return static_cast<std::int64_t>(r.members); });
  each("ddprun_rendezvous_waiting_nodes", "gauge", "Nodes waiting in JOIN.",
       [](const S& r) { return static_cast<std::int64_t>(r.joining); });
  each("ddprun_rendezvous_restarts_used", "gauge", "Restarts of the job-wide budget used.",
       [](const S& r) { return r.restarts; });
  each("ddprun_rendezvous_restarts_left", "gauge", "Restarts of the job-wide budget left.",
       [](const S& r) { return r.maxRestarts - r.restarts; });
  each("ddprun_rendezvous_failures_total", "counter", "Rounds ended by a worker failure.",
       [](const S& r) { return r.failures; });
  return t.take();
}

}  // namespace ddprun::rendezvous
