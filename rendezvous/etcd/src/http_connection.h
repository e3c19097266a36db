// HttpConnection: one HTTP/1.1 keep-alive connection to one etcd member's
// JSON gateway (plain TCP or TLS), with a deadline on every operation.
// post() is a request and its whole reply; openStream() + readLine() read a
// streamed reply (a watch) one newline-delimited JSON message at a time.
//
// Thread-safety: one thread uses it at a time; cancel() may be called from
// any thread and makes a blocked call fail promptly.
// Ownership: owns its socket and its private io_context.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "ddprun/rendezvous/etcd_options.h"

namespace ddprun::rendezvous {

class HttpConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // Does not connect yet. `endpoint` is "host:port".
  HttpConnection(const EtcdOptions& options, std::string endpoint);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // POSTs `body` (JSON) to `target` and returns the reply's body; an HTTP
  // status other than 200 throws ServerError with etcd's message.
  // Connects first if needed. Throws NetworkError (and closes) when the
  // member cannot be reached or the connection breaks, TimeoutError past
  // `deadline`.
  std::string post(const std::string& target, const std::string& body, Clock::time_point deadline);
  // Sends a request whose reply is a stream of JSON messages.
  void openStream(const std::string& target, const std::string& body, Clock::time_point deadline);
  // Blocks for the stream's next message (no deadline: a watch may be
  // quiet for hours). Throws NetworkError when the stream ended or broke,
  // or cancel() was called.
  std::string readLine();
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
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
