// HttpConnection: one HTTP/1.1 keep-alive connection to one etcd member's
// JSON gateway (plain TCP or TLS), with a deadline on every operation.
// post() is a request and its whole reply; openWebSocket() turns the
// connection into a WebSocket on one of the gateway's streams (a watch),
// read with readMessage() and written with writeMessage(), one JSON message
// each: both ways at once, so a running watch can take more keys.
//
// Thread-safety: one thread uses it at a time; cancel() may be called from
// any thread and makes a blocked call fail promptly.
// Ownership: owns its socket and its private io_context.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <boost/system/error_code.hpp>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/etcd_options.h"

namespace ddprun::rendezvous {

// etcd is there but cannot serve the request now (HTTP 503 or 429: no
// leader, a leader change, a proposal that timed out under load, too many
// requests): worth trying again after a back-off.
class EtcdBusyError : public NetworkError {
 public:
  using NetworkError::NetworkError;
};

class HttpConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // Does not connect yet. `endpoint` is "host:port".
  HttpConnection(const EtcdOptions& options, std::string endpoint);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // POSTs `body` (JSON) to `target` and returns the reply's body; an HTTP
  // status other than 200 throws ServerError with etcd's message
  // (EtcdBusyError for 503 and 429).
  // Connects first if needed. Throws NetworkError (and closes) when the
  // member cannot be reached or the connection breaks, TimeoutError past
  // `deadline`.
  std::string post(const std::string& target, const std::string& body, Clock::time_point deadline);
  // Upgrades to a WebSocket on `target` (connecting first if needed).
  // Throws as post() does.
  void openWebSocket(const std::string& target, Clock::time_point deadline);
  // Sends one text message on the WebSocket.
  void writeMessage(const std::string& text, Clock::time_point deadline);
  // Blocks for the WebSocket's next message (no deadline: a watch may be
  // quiet for hours). Throws NetworkError when it closed or broke, or
  // cancel() was called.
  std::string readMessage();
  // Closes the connection (from any thread).
  void cancel();

  const std::string& endpoint() const { return endpoint_; }
  // This side's address of the connection ("" when not connected): the
  // address other nodes can reach this machine at.
  std::string localAddress() const;

 private:
  struct Impl;
  // The connection's own event loop: out of descriptors (a process with
  // thousands of connections) is a NetworkError the caller retries.
  static std::unique_ptr<Impl> makeImpl(const EtcdOptions& options, const std::string& endpoint);
  // Connects (TCP, then TLS) if not connected yet.
  void connect(Clock::time_point deadline);
  [[noreturn]] void fail(const boost::system::error_code& ec, const char* what);
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
