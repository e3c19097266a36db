#include "http_connection.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <fmt/format.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "ddprun/common/error.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
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
  explicit Impl(const EtcdOptions& o) : options(o), tlsContext(asio::ssl::context::tls_client) {
    onChunk = [this](std::uint64_t, beast::string_view data, beast::error_code&) {
      if (lines.size() + data.size() > kBodyLimit) return std::size_t{0};  // stops the parser
      lines.append(data.data(), data.size());
      return data.size();
    };
  }

  const EtcdOptions& options;
  asio::io_context io;
  asio::ssl::context tlsContext;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  std::unique_ptr<http::response_parser<http::string_body>> stream;  // openStream's reply
  std::string lines;  // the stream's bytes not yet returned
  // The parser keeps a reference to its chunk callback: it lives here.
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> onChunk;
  std::atomic<bool> cancelled{false};

  bool connected() const { return plain || tls; }
  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*tls); }

  void close() {
    if (!connected()) return;
    beast::error_code ignored;
    lowest().socket().close(ignored);
    plain.reset();
    tls.reset();
    stream.reset();
    buffer.clear();
    lines.clear();
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
  // pending operation completes as aborted while its stream, parser and
  // buffer still exist; the blocked call then frees them on its own thread.
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

std::string HttpConnection::post(const std::string& target, const std::string& body,
                                 Clock::time_point deadline) {
  openStream(target, body, deadline);
  Impl& c = *impl_;
  const beast::error_code ec = c.run(deadline, [&](auto handler) {
    c.withStream([&](auto& s) { http::async_read(s, c.buffer, *c.stream, std::move(handler)); });
  });
  if (ec) {
    c.close();
    if (ec == beast::error::timeout) {
      throw TimeoutError(fmt::format("etcd at {} did not answer in time", endpoint_));
    }
    throw NetworkError(fmt::format("etcd at {}: {}", endpoint_, ec.message()));
  }
  auto response = c.stream->release();
  c.stream.reset();
  if (!response.keep_alive()) c.close();
  if (response.result() != http::status::ok) {
    throw ServerError(
        fmt::format("etcd at {} refused {}: {}", endpoint_, target, etcdMessage(response.body())));
  }
  return std::move(response.body());
}

void HttpConnection::openStream(const std::string& target, const std::string& body,
                                Clock::time_point deadline) {
  Impl& c = *impl_;
  if (c.cancelled)
    throw NetworkError(fmt::format("the connection to etcd at {} was closed", endpoint_));
  const auto fail = [&](const beast::error_code& ec, const char* what) {
    c.close();
    if (ec == beast::error::timeout) {
      throw TimeoutError(fmt::format("etcd at {}: {} timed out", endpoint_, what));
    }
    throw NetworkError(fmt::format("etcd at {}: {} failed: {}", endpoint_, what, ec.message()));
  };
  std::string host;
  std::string port;
  splitEndpoint(endpoint_, host, port);
  if (!c.connected()) {
    tcp::resolver resolver(c.io);
    beast::error_code ec;
    const auto addresses = resolver.resolve(host, port, ec);
    if (ec) fail(ec, "resolving its address");
    if (c.options.tls) {
      c.tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(c.io, c.tlsContext);
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
    if (c.tls) {
      ec = c.run(deadline, [&](auto handler) {
        c.tls->async_handshake(asio::ssl::stream_base::client, std::move(handler));
      });
      if (ec) fail(ec, "the TLS handshake");
    }
  }
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
  c.stream = std::make_unique<http::response_parser<http::string_body>>();
  c.stream->body_limit(kBodyLimit);
  c.lines.clear();
}

std::string HttpConnection::readLine() {
  Impl& c = *impl_;
  if (!c.stream) throw NetworkError(fmt::format("no stream is open to etcd at {}", endpoint_));
  auto& parser = *c.stream;
  // One read of the stream, without a deadline (etcd pushes when it has
  // news); a failure closes the connection.
  auto read = [&](auto start) {
    const beast::error_code ec = c.run(Clock::time_point::max(), [&](auto handler) {
      c.withStream([&](auto& s) { start(s, std::move(handler)); });
    });
    if (ec) {
      c.close();
      throw NetworkError(
          fmt::format("the stream from etcd at {} broke: {}", endpoint_, ec.message()));
    }
  };
  if (!parser.is_header_done()) {
    read([&](auto& s, auto handler) {
      http::async_read_header(s, c.buffer, parser, std::move(handler));
    });
    if (parser.get().result() != http::status::ok) {
      c.run(Clock::now() + c.options.requestTimeout, [&](auto handler) {
        c.withStream([&](auto& s) { http::async_read(s, c.buffer, parser, std::move(handler)); });
      });
      const std::string message = etcdMessage(parser.get().body());
      c.close();
      throw ServerError(fmt::format("etcd at {} refused a stream: {}", endpoint_, message));
    }
    parser.on_chunk_body(c.onChunk);
  }
  for (;;) {
    if (const std::size_t end = c.lines.find('\n'); end != std::string::npos) {
      std::string line = c.lines.substr(0, end);
      c.lines.erase(0, end + 1);
      return line;
    }
    if (parser.is_done()) {
      c.close();
      throw NetworkError(fmt::format("etcd at {} ended the stream", endpoint_));
    }
    read([&](auto& s, auto handler) {
      http::async_read_some(s, c.buffer, parser, std::move(handler));
    });
  }
}

}  // namespace ddprun::rendezvous
