// Transport: one accepted connection of the store server, whatever it
// speaks. It owns the socket, one input buffer, one output queue drained by
// one writer at a time, the connection's share of the server's
// ResourceBudget, and the handshake deadline. It reads the first bytes,
// hands the connection to the session of the dialect they show
// (NativeSession for "DDPR", TcpStoreSession for PyTorch's TCPStore), and
// feeds that session from then on.
//
// Anything wrong with the peer's bytes closes this connection only. What it
// buffers is charged to the budget after every step; a reply that would
// pass the budget is refused before it is built (reserveReply).
//
// Thread-safety: the server's loop thread only.
// Ownership: shared_ptr; the read coroutine, timers and writes hold it; it
// owns its session.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/protocol.h"
#include "dialect_session.h"
#include "resource_budget.h"

namespace ddprun::rendezvous {

struct ServerContext;

// Buffers larger than this are given back when they empty.
inline constexpr std::size_t kIdleBufferBytes = 64 * 1024;

class Transport : public std::enable_shared_from_this<Transport> {
 public:
  using Clock = std::chrono::steady_clock;

  // `remote` is the peer's endpoint as the listener admitted it (its
  // address is what the per-address count was charged to).
  Transport(boost::asio::ip::tcp::socket socket, const boost::asio::ip::tcp::endpoint& remote,
            ServerContext& context);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Serves the connection until it closes.
  boost::asio::awaitable<void> run();

  // --- for its session -----------------------------------------------------
  ServerContext& context() { return context_; }
  InputBuffer& input() { return input_; }
  std::string& output() { return output_; }
  const std::string& peer() const { return peer_; }          // "host:port", for logs
  const std::string& peerHost() const { return peerHost_; }  // the address alone
  boost::asio::any_io_executor executor() { return socket_.get_executor(); }

  // Starts writing queued output (directly when the socket takes it).
  // Never closes the connection inside the call: a write that fails (or
  // drains a closing connection) closes it on the loop's next turn, so a
  // push or an answer from another connection's handler (a round's end
  // walking its participants, a SET waking waiters) never re-enters the
  // session, the rendezvous or the store while they walk a collection.
  void flush();
  // Stops reading; closes once the queued output is written.
  void closeAfterFlush();
  // Closes the socket and lets the session drop what it holds. Idempotent.
  void close(const std::string& reason = "its connection closed");
  // Refuses a client that has not proven itself: one (rate-limited) log
  // line, an error frame if it speaks the native protocol, close.
  void reject(protocol::Status status, const std::string& reason);
  // Reserves budget for a reply of `bytes`; false when it passes the frame
  // limit or the server's budget (then it must not be built).
  bool reserveReply(std::size_t bytes);
  // Reserves budget for `bytes` more of anything (a wait, a frame's input);
  // false when the server's budget cannot take them.
  bool reserve(std::size_t bytes);
  // Resizes the charge to what the connection holds; false (and closed on
  // the loop's next turn, as flush()) when the server's budget is spent.
  bool updateCharge();
  // The connection has shown it is a real client.
  void markProven();
  // Activity: the idle deadline moves.
  void touch() { lastActivity_ = Clock::now(); }
  // The session's idle deadline changed (a heartbeat limit was set).
  void rearmDeadline();
  bool closed() const { return closed_; }
  bool closing() const { return closing_; }
  bool proven() const { return proven_; }
  Clock::time_point started() const { return started_; }
  std::size_t bufferedOutput() const { return output_.size() + inFlight_.size(); }

 private:
  // Chooses the session from the first bytes; false when the connection
  // was refused. Leaves session_ empty while more bytes are needed.
  bool detectDialect();
  bool process();
  // Reads what the socket holds now into the input buffer, without
  // waiting: the bytes read, 0 when none are there yet; `ec` is set when the
  // peer ended the connection or it failed.
  std::size_t readReady(boost::system::error_code& ec);
  // Closes on the loop's next turn (see flush()).
  void closeSoon();
  boost::asio::awaitable<void> watchdog();

  boost::asio::ip::tcp::socket socket_;
  ServerContext& context_;
  std::string peer_ = "unknown peer";
  std::string peerHost_;
  InputBuffer input_;
  // What a waiting read reads into: a connection holds no input buffer
  // while it waits (most of a large job's connections do).
  std::array<char, 64> firstBytes_{};
  std::string output_;    // replies waiting for the next write
  std::string inFlight_;  // replies being written now
  bool writing_ = false;
  bool closing_ = false;      // stop reading; close once output is written
  bool closeQueued_ = false;  // closeSoon() posted the close
  bool closed_ = false;
  bool proven_ = false;
  bool bytesSeen_ = false;
  ResourceBudget::Charge charge_;
  Clock::time_point started_;
  Clock::time_point lastActivity_;
  boost::asio::steady_timer watchdogTimer_;
  boost::asio::steady_timer drained_;  // cancelled when output drains
  std::unique_ptr<DialectSession> session_;
  std::uint64_t* dialectCount_ = nullptr;  // the metrics' open count of its dialect
};

}  // namespace ddprun::rendezvous
