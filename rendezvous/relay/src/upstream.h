// Upstream: the relay's one connection to the job's store, in ddprun's
// native protocol: the preamble and HELLO with the agents' token, then any
// number of requests in flight at once, each answered by request id
// (docs/protocol.md). Requests sent before the store has accepted the
// HELLO wait for it, in order. Until then a refused or dropped connection
// is tried again (a store busy with thousands of agents connecting at once
// may shed one) until `connectTimeout`; after it, a lost connection is the
// store lost, except the store's goodbye to an idle connection (nothing
// pending): then it connects again, as any client does.
//
// Thread-safety: the relay's loop thread only.
// Ownership: shared_ptr (reads and writes hold it); handlers are owned
// until their reply, a cancel's confirmation, or the loss.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ddprun/common/retry_backoff.h"
#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/reply_reader.h"

namespace ddprun::rendezvous::relay {

// A reply: kOk and its body, an error status and its message, or the
// upstream lost (`lost`, with the reason as message).
struct UpstreamReply {
  rendezvous::protocol::Status status = rendezvous::protocol::Status::kOk;
  std::string_view body;  // kOk: the reply's body (valid during the call)
  std::string message;
  bool lost = false;
  bool ok() const { return !lost && status == rendezvous::protocol::Status::kOk; }
};

class Upstream : public std::enable_shared_from_this<Upstream> {
 public:
  using Handler = std::function<void(const UpstreamReply&)>;

  struct Options {
    std::string host;
    std::uint16_t port = 0;
    std::string token;
    std::string name;
    std::string sourceHost;  // empty: any
    std::size_t maxFrameBytes = 64 * 1024 * 1024;
    std::chrono::milliseconds connectTimeout{30000};
    std::chrono::microseconds connectSpread{0};  // the first connect's random delay, below
  };

  Upstream(boost::asio::any_io_executor executor, Options options,
           std::function<void(const std::string&)> onLost);
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Connects; `onReady` runs once the store has accepted the HELLO.
  void start(std::function<void()> onReady = {});
  // Queues `request`; `handler` gets its reply. Returns its request id.
  std::uint32_t send(const rendezvous::protocol::Request& request, Handler handler);
  // Drops pending request `id` on the store (CANCEL): its handler is never
  // called. `done` (if any) hears whether the store still held it (false:
  // it was answered already).
  void cancel(std::uint32_t id, std::function<void(bool)> done = {});
  // How many requests were sent so far: a request's place in the order
  // the store sees them.
  std::uint64_t sequence() const { return sequence_; }
  bool lost() const { return lost_; }
  boost::asio::any_io_executor executor() { return socket_.get_executor(); }
  void close(const std::string& reason);

 private:
  void connect();
  void connected(std::uint64_t generation, const boost::system::error_code& error);
  void retryConnect(const std::string& why);
  // The connection broke: tried again before the HELLO's answer, else lost.
  void broken(const std::string& why);
  void readLoop();
  void handleFrame(ReceivedFrame& frame);
  void flush();
  void fail(const std::string& reason);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::steady_timer retryTimer_;
  RetryBackoff backoff_;  // between attempts to connect (ddprun's one policy)
  Options options_;
  std::function<void(const std::string&)> onLost_;
  std::function<void()> onReady_;
  std::chrono::steady_clock::time_point connectDeadline_;
  rendezvous::InputBuffer input_{64 * 1024};
  std::string hello_;   // the preamble and HELLO, sent first on every connection
  std::string output_;  // requests, sent once the HELLO is answered
  std::string writing_;
  bool connected_ = false;
  bool ready_ = false;            // the store accepted the HELLO
  std::uint64_t generation_ = 0;  // of the socket: handlers of an older one are stale
  bool lost_ = false;
  std::unordered_map<std::uint32_t, Handler> pending_;
  std::uint32_t nextId_ = 1;
  std::uint32_t helloId_ = 0;
  std::uint64_t sequence_ = 0;
};

}  // namespace ddprun::rendezvous::relay
