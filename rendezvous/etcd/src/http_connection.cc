#include "http_connection.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <fmt/format.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "ddprun/common/error.h"
#include "ddprun/common/tcp_liveness.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

// etcd's replies are small; a watch message carries at most a few keys.
constexpr std::uint64_t kBodyLimit = 64ull << 20;

// etcd's error reply: {"error": "...", "code": N, "message": "..."}.
std::string etcdMessage(const std::string& body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object()) {
    for (const char* field : {"message", "error"}) {
      if (json.contains(field) && json[field].is_string()) return json[field];
    }
  }
  return body.substr(0, 200);
}

}  // namespace

struct HttpConnection::Impl {
  using TlsStream = beast::ssl_stream<beast::tcp_stream>;

  explicit Impl(const EtcdOptions& o) : options(o), tlsContext(asio::ssl::context::tls_client) {}

  const EtcdOptions& options;
  asio::io_context io;
  asio::ssl::context tlsContext;
  // Exactly one of these once connected: an HTTP connection (plain, TLS)
  // or, after openWebSocket(), a WebSocket over it.
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<TlsStream> tls;
  std::unique_ptr<websocket::stream<beast::tcp_stream>> wsPlain;
  std::unique_ptr<websocket::stream<TlsStream>> wsTls;
  beast::flat_buffer buffer;
  std::atomic<bool> cancelled{false};

  bool connected() const { return plain || tls || wsPlain || wsTls; }
  beast::tcp_stream& lowest() {
    if (plain) return *plain;
    if (tls) return beast::get_lowest_layer(*tls);
    if (wsPlain) return beast::get_lowest_layer(*wsPlain);
    return beast::get_lowest_layer(*wsTls);
  }

  void close() {
    if (!connected()) return;
    beast::error_code ignored;
    lowest().socket().close(ignored);
    plain.reset();
    tls.reset();
    wsPlain.reset();
    wsTls.reset();
    buffer.clear();
  }

  // Starts one asynchronous operation and runs it to completion.
  template <typename Start>
  beast::error_code run(Clock::time_point deadline, Start&& start) {
    if (deadline == Clock::time_point::max()) {
      lowest().expires_never();
    } else {
      lowest().expires_at(deadline);
    }
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    if (cancelled) result = asio::error::operation_aborted;
    return result;
  }

  template <typename Fn>
  auto withWebSocket(Fn&& fn) {
    return wsPlain ? fn(*wsPlain) : fn(*wsTls);
  }

  template <typename Fn>
  auto withStream(Fn&& fn) {
    return plain ? fn(*plain) : fn(*tls);
  }

  void configureTls() {
    tlsContext.set_verify_mode(asio::ssl::verify_peer);
    if (options.caFile.empty()) {
      tlsContext.set_default_verify_paths();
    } else {
      tlsContext.load_verify_file(options.caFile);
    }
    if (!options.certFile.empty()) tlsContext.use_certificate_chain_file(options.certFile);
    if (!options.keyFile.empty()) {
      tlsContext.use_private_key_file(options.keyFile, asio::ssl::context::pem);
    }
  }
};

std::unique_ptr<HttpConnection::Impl> HttpConnection::makeImpl(const EtcdOptions& options,
                                                               const std::string& endpoint) {
  try {
    return std::make_unique<HttpConnection::Impl>(options);
  } catch (const boost::system::system_error& e) {
    throw NetworkError(
        fmt::format("cannot open a connection to etcd at {}: {}", endpoint, e.what()));
  }
}

HttpConnection::HttpConnection(const EtcdOptions& options, std::string endpoint)
    : endpoint_(std::move(endpoint)), impl_(makeImpl(options, endpoint_)) {
  if (options.tls) {
    try {
      impl_->configureTls();
    } catch (const boost::system::system_error& e) {
      throw ConfigError(fmt::format(
          "cannot load etcd's TLS files (ca_cert '{}', cert '{}', key '{}'): {}; check the "
          "--rdzv_conf paths",
          options.caFile, options.certFile, options.keyFile, e.what()));
    }
  }
}

HttpConnection::~HttpConnection() = default;

std::string HttpConnection::localAddress() const {
  if (!impl_->connected()) return "";
  beast::error_code ec;
  const auto local = impl_->lowest().socket().local_endpoint(ec);
  return ec ? "" : local.address().to_string();
}

void HttpConnection::cancel() {
  impl_->cancelled = true;
  // Only the socket closes here, on the connection's own event loop: the
  // pending operation completes as aborted while its stream and buffer
  // still exist; the blocked call then frees them on its own thread.
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    if (impl->connected()) impl->lowest().socket().close(ignored);
  });
}

namespace {

void splitEndpoint(const std::string& endpoint, std::string& host, std::string& port) {
  const std::size_t colon = endpoint.rfind(':');
  host = endpoint.substr(0, colon);
  port = endpoint.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
}

}  // namespace

[[noreturn]] void HttpConnection::fail(const beast::error_code& ec, const char* what) {
  impl_->close();
  if (ec == beast::error::timeout) {
    throw TimeoutError(fmt::format("etcd at {}: {} timed out", endpoint_, what));
  }
  throw NetworkError(fmt::format("etcd at {}: {} failed: {}", endpoint_, what, ec.message()));
}

void HttpConnection::connect(Clock::time_point deadline) {
  Impl& c = *impl_;
  if (c.cancelled) {
    throw NetworkError(fmt::format("the connection to etcd at {} was closed", endpoint_));
  }
  if (c.connected()) return;
  std::string host;
  std::string port;
  splitEndpoint(endpoint_, host, port);
  tcp::resolver resolver(c.io);
  beast::error_code ec;
  const auto addresses = resolver.resolve(host, port, ec);
  if (ec) fail(ec, "resolving its address");
  if (c.options.tls) {
    c.tls = std::make_unique<Impl::TlsStream>(c.io, c.tlsContext);
    if (!SSL_set_tlsext_host_name(c.tls->native_handle(), host.c_str())) {
      // An IP address: no SNI, the certificate's IP SAN is checked.
    }
    c.tls->set_verify_callback(asio::ssl::host_name_verification(host));
  } else {
    c.plain = std::make_unique<beast::tcp_stream>(c.io);
  }
  ec = c.run(deadline,
             [&](auto handler) { c.lowest().async_connect(addresses, std::move(handler)); });
  if (ec) fail(ec, "connecting");
  c.lowest().socket().set_option(tcp::no_delay(true));
  if (c.options.silenceLimit.count() > 0) {
    setTcpSilenceLimit(c.lowest().socket().native_handle(), c.options.silenceLimit);
  }
  if (c.tls) {
    ec = c.run(deadline, [&](auto handler) {
      c.tls->async_handshake(asio::ssl::stream_base::client, std::move(handler));
    });
    if (ec) fail(ec, "the TLS handshake");
  }
}

std::string HttpConnection::post(const std::string& target, const std::string& body,
                                 Clock::time_point deadline) {
  Impl& c = *impl_;
  if (c.wsPlain || c.wsTls) throw Error("an etcd WebSocket cannot carry HTTP requests");
  connect(deadline);
  http::request<http::string_body> request{http::verb::post, target, 11};
  request.set(http::field::host, endpoint_);
  request.set(http::field::content_type, "application/json");
  request.keep_alive(true);
  request.body() = body;
  request.prepare_payload();
  beast::error_code ec = c.run(deadline, [&](auto handler) {
    c.withStream([&](auto& s) { http::async_write(s, request, std::move(handler)); });
  });
  if (ec) fail(ec, "sending a request");
  http::response_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  ec = c.run(deadline, [&](auto handler) {
    c.withStream([&](auto& s) { http::async_read(s, c.buffer, parser, std::move(handler)); });
  });
  if (ec) fail(ec, "reading the reply");
  auto response = parser.release();
  if (!response.keep_alive()) c.close();
  if (response.result() == http::status::service_unavailable ||
      response.result() == http::status::too_many_requests) {
    throw EtcdBusyError(
        fmt::format("etcd at {} is busy: {}", endpoint_, etcdMessage(response.body())));
  }
  if (response.result() != http::status::ok) {
    throw ServerError(
        fmt::format("etcd at {} refused {}: {}", endpoint_, target, etcdMessage(response.body())));
  }
  return std::move(response.body());
}

void HttpConnection::openWebSocket(const std::string& target, Clock::time_point deadline) {
  Impl& c = *impl_;
  if (c.wsPlain || c.wsTls) return;
  connect(deadline);
  // The WebSocket takes the connected stream over.
  if (c.plain) {
    c.wsPlain = std::make_unique<websocket::stream<beast::tcp_stream>>(std::move(*c.plain));
    c.plain.reset();
  } else {
    c.wsTls = std::make_unique<websocket::stream<Impl::TlsStream>>(std::move(*c.tls));
    c.tls.reset();
  }
  beast::error_code ec = c.run(deadline, [&](auto handler) {
    c.withWebSocket([&](auto& ws) {
      ws.read_message_max(kBodyLimit);
      ws.async_handshake(endpoint_, target, std::move(handler));
    });
  });
  if (ec) {
    // etcd answers a refused upgrade with an HTTP error: say which.
    if (ec == websocket::error::upgrade_declined) {
      c.close();
      throw ServerError(fmt::format("etcd at {} refused a WebSocket on {}", endpoint_, target));
    }
    fail(ec, "opening a WebSocket");
  }
}

void HttpConnection::writeMessage(const std::string& text, Clock::time_point deadline) {
  Impl& c = *impl_;
  if (!c.wsPlain && !c.wsTls) throw Error("no WebSocket is open to etcd");
  const beast::error_code ec = c.run(deadline, [&](auto handler) {
    c.withWebSocket([&](auto& ws) {
      ws.text(true);
      ws.async_write(asio::buffer(text), std::move(handler));
    });
  });
  if (ec) fail(ec, "sending on a WebSocket");
}

std::string HttpConnection::readMessage() {
  Impl& c = *impl_;
  if (!c.wsPlain && !c.wsTls) {
    throw NetworkError(fmt::format("no WebSocket is open to etcd at {}", endpoint_));
  }
  c.buffer.clear();
  const beast::error_code ec = c.run(Clock::time_point::max(), [&](auto handler) {
    c.withWebSocket([&](auto& ws) { ws.async_read(c.buffer, std::move(handler)); });
  });
  if (ec) {
    c.close();
    throw NetworkError(fmt::format("the stream from etcd at {} broke: {}", endpoint_,
                                   ec == websocket::error::closed ? "it closed" : ec.message()));
  }
  std::string message = beast::buffers_to_string(c.buffer.data());
  c.buffer.clear();
  return message;
}

}  // namespace ddprun::rendezvous
