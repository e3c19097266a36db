// Session: one client connection of the store server.
//
// A coroutine reads bytes, splits them into frames and handles each request;
// replies are appended to an output buffer that one write at a time drains,
// so replies of a pipelined batch leave in one write. Blocking requests
// (WAIT, GET, MULTI_GET) register a waiter in StoreState and a timer; the
// write that completes them, or the timer, sends the reply. A watchdog timer
// enforces the handshake deadline and the idle limit.
//
// Anything wrong with the peer's bytes closes this connection only. What the
// connection buffers (input, a request being received, queued replies,
// pending waits) is charged to the server's ResourceBudget after every step;
// a reply that would pass it is refused before it is built.
//
// Thread-safety: lives on the server's loop thread only.
// Ownership: shared_ptr; the read coroutine, timers and writes hold it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/tcpstore_codec.h"
#include "rendezvous_manager.h"
#include "server_context.h"

namespace ddprun::rendezvous {

class Session : public std::enable_shared_from_this<Session>, public RendezvousManager::Peer {
 public:
  Session(boost::asio::ip::tcp::socket socket, ServerContext& context);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Serves the connection until it closes.
  boost::asio::awaitable<void> run();
  // Closes the socket, drops pending waits and leaves every rendezvous
  // (its peers are told). Idempotent.
  void close(const std::string& reason = "its connection closed");

  // RendezvousManager::Peer
  void pushEvent(const protocol::Event& event) override;
  void answerClosed(std::uint32_t requestId, const protocol::JobFailure& failure) override;
  void answerJoin(std::uint32_t requestId, protocol::Status status,
                  const protocol::Assignment& assignment, const std::string& message) override;
  const std::string& peerAddress() const override { return peerHost_; }

  bool proven() const { return proven_; }
  std::chrono::steady_clock::time_point started() const { return started_; }

 private:
  struct PendingWait {
    StoreState::WaiterId waiter = 0;
    protocol::Op op = protocol::Op::kWait;
    std::vector<std::string> keys;
    std::unique_ptr<boost::asio::steady_timer> timer;
    std::size_t bytes = 0;  // charged to the session while it waits
  };

  // Tells a native client from a PyTorch TCPStore client by its first
  // bytes; false when the connection was refused.
  bool detectDialect();
  bool processTcpStore();
  void handleTcpStore(tcpstore::Request& request);
  // Handles every complete frame in the input; false when the connection
  // must stop reading (rejected, or a frame that breaks the framing).
  bool processInput();
  void handleFrame(const protocol::FrameHeader& header, std::string_view body);
  void handleHello(std::uint32_t id, const protocol::Request& request);
  void handleRequest(std::uint32_t id, protocol::Request& request);
  // Whether this client may use every key of `request`; if not, the error
  // reply is sent.
  bool mayUse(std::uint32_t id, const protocol::Request& request);
  void startWait(std::uint32_t id, protocol::Request& request);
  void completeWait(std::uint32_t id);
  void timeoutWait(std::uint32_t id);
  void handleRendezvous(std::uint32_t id, protocol::Request& request);

  void sendOk(std::uint32_t id, protocol::Op op, const protocol::Reply& reply);
  void sendStatus(std::uint32_t id, protocol::Op op, protocol::Status status,
                  const protocol::Reply& reply);
  void sendError(std::uint32_t id, protocol::Status status, std::string_view message);
  // Refuses the client at the handshake: one log line, an error frame if it
  // speaks the native protocol, close.
  void reject(protocol::Status status, const std::string& reason);
  void flush();
  void closeAfterFlush();

  boost::asio::awaitable<void> watchdog();
  std::size_t bufferedOutput() const { return output_.size() + inFlight_.size(); }
  // The connection has shown it is a real client (authenticated, or a valid
  // first TCPStore request).
  void markProven();
  // Resizes this connection's budget charge to what it holds; false (and
  // the connection closed) when the server's budget is spent.
  bool updateCharge();
  // Reserves budget for a reply of `bytes`; false when it passes the frame
  // limit or the server's budget (then it must not be built).
  bool reserveReply(std::size_t bytes);
  // One warning for the server's log, limited per kind of event.
  void warnLimited(LogLimiter& limiter, const std::string& message);
  void startTcpStoreWaitTimer();

  boost::asio::ip::tcp::socket socket_;
  ServerContext& context_;
  std::string peer_;      // "host:port", for logs
  std::string peerHost_;  // host only: the address other nodes may use
  InputBuffer input_;
  std::string output_;    // replies waiting for the next write
  std::string inFlight_;  // replies being written now
  bool writing_ = false;
  bool closing_ = false;  // stop reading; close once output is written
  bool closed_ = false;
  bool preambleSeen_ = false;
  bool authenticated_ = false;
  // Native clients: the full token (or an open store) makes an agent; a
  // worker credential reaches key-value operations under "<workerJob_>/".
  enum class Role { kAgent, kWorker };
  Role role_ = Role::kAgent;
  std::string workerJob_;
  bool member_ = false;  // an agent that joined: its address is a member
  bool proven_ = false;
  bool bytesSeen_ = false;
  ResourceBudget::Charge charge_;
  std::size_t waitBytes_ = 0;  // keys of pending waits, charged
  enum class Dialect { kUnknown, kNative, kTcpStoreV1, kTcpStoreV2 };
  Dialect dialect_ = Dialect::kUnknown;
  std::optional<tcpstore::Decoder> tcpDecoder_;              // TCPStore dialects only
  std::optional<StoreState::WaiterId> tcpWait_;              // a TCPStore WAIT in progress
  std::unique_ptr<boost::asio::steady_timer> tcpWaitTimer_;  // ends it at maxWaitTime
  std::unordered_map<std::uint32_t, PendingWait> waits_;
  std::size_t pendingJoins_ = 0;
  // Heartbeat limit of a rendezvous member: silence this long means dead.
  std::chrono::milliseconds keepAlive_{0};
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point lastActivity_;
  boost::asio::steady_timer watchdogTimer_;
  boost::asio::steady_timer drained_;  // cancelled when output drains
};

}  // namespace ddprun::rendezvous
