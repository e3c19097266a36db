#include "transport.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <tuple>

#include <cstring>

#include "awaitable.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/parse.h"
#include "native_session.h"
#include "server_context.h"
#include "tcpstore_session.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using protocol::Status;

namespace {

// Stop reading from a client that does not read its replies.
constexpr std::size_t kMaxBufferedOutput = 128 * 1024 * 1024;

}  // namespace

Transport::Transport(asio::ip::tcp::socket socket, const asio::ip::tcp::endpoint& remote,
                     ServerContext& context)
    : socket_(std::move(socket)),
      context_(context),
      charge_(context.budget),
      started_(Clock::now()),
      lastActivity_(started_),
      watchdogTimer_(socket_.get_executor()),
      drained_(socket_.get_executor()) {
  if (remote.port() != 0) {
    peerHost_ = remote.address().to_string();
    peer_ = hostPort(peerHost_, remote.port());
  }
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);  // flush() writes directly when it can
  context_.connections.insert(this);
  context_.counters.accepted++;
  context_.counters.active++;
  context_.unproven++;
}

Transport::~Transport() { close(); }

asio::awaitable<void> Transport::run() {
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), watchdog(), asio::detached);
  while (!closed_ && !closing_ && !closeQueued_) {
    if (bufferedOutput() > kMaxBufferedOutput) {
      // The client pipelines faster than it reads: wait for the writes.
      drained_.expires_at(std::chrono::steady_clock::time_point::max());
      co_await drained_.async_wait(kAwait);
      continue;
    }
    boost::system::error_code ec;
    std::size_t n = 0;
    if (input_.readable().empty()) {
      // Nothing half-read: hold no input buffer while waiting for bytes (a
      // job's store may hold 100K connections, most blocked in a wait).
      // The wait is a read into the connection's own few bytes: a waiting
      // read costs no system call, where a wait for readability re-arms
      // epoll each time (one epoll_ctl per request).
      input_.release();
      if (!updateCharge()) break;
      std::tie(ec, n) = co_await socket_.async_read_some(asio::buffer(firstBytes_), kAwait);
      if (!ec && (closed_ || closing_ || closeQueued_)) break;
      if (!ec) {
        std::size_t space = 0;
        std::memcpy(input_.writable(0, space), firstBytes_.data(), n);
        input_.commit(n);
        // More may be there already: read it now, without waiting.
        if (n == firstBytes_.size()) n += readReady(ec);
      }
    } else {
      // A frame is half-read: read at once; wait only when the bytes are
      // not there yet.
      n = readReady(ec);
      if (!ec && n == 0) {
        std::size_t space = 0;
        char* tail = input_.writable(0, space);
        std::tie(ec, n) = co_await socket_.async_read_some(asio::buffer(tail, space), kAwait);
        if (!ec) input_.commit(n);
      }
    }
    if (ec && n == 0) {
      if (!proven_ && !closed_ && ec != asio::error::eof) {
        context_.counters.rejected++;
        DDPRUN_WARN("Rejected client {}: the connection failed before the handshake ({}).", peer_,
                    ec.message());
      }
      break;
    }
    context_.metrics.bytesReceived += n;
    lastActivity_ = std::chrono::steady_clock::now();
    if (!bytesSeen_) {
      bytesSeen_ = true;
      if (!proven_) watchdogTimer_.cancel();  // a silent socket spoke: re-arm the deadline
    }
    try {
      if (!process()) break;
    } catch (const std::bad_alloc&) {
      // Out of memory while handling this client's bytes: this connection
      // goes, with everything it held; the others carry on.
      context_.closedLog.warn(
          fmt::format("Closing the connection of {}: out of memory while handling its "
                      "request.",
                      peer_));
      close();
      break;
    }
    flush();
    if (!updateCharge()) break;
    if (ec) break;  // it ended (or failed) after these bytes
  }
  if (!closing_) close();
}

std::size_t Transport::readReady(boost::system::error_code& ec) {
  std::size_t space = 0;
  char* tail = input_.writable(0, space);
  const std::size_t n = socket_.read_some(asio::buffer(tail, space), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec = {};
    return 0;
  }
  if (ec) return 0;
  input_.commit(n);
  return n;
}

bool Transport::process() {
  if (!session_) {
    if (!detectDialect()) return false;
    if (!session_) return true;  // need more bytes
  }
  return session_->process();
}

void Transport::rearmDeadline() { watchdogTimer_.cancel(); }

void Transport::markProven() {
  if (proven_) return;
  proven_ = true;
  context_.unproven--;
  watchdogTimer_.cancel();  // re-arm for the idle limit
}

bool Transport::updateCharge() {
  if (closed_) return false;
  const std::size_t held = input_.capacity() + (session_ ? session_->heldBytes() : 0) +
                           output_.capacity() + inFlight_.capacity();
  if (charge_.resize(held)) return true;
  context_.closedLog.warn(
      fmt::format("Closing the connection of {}: it holds {} bytes and the server's "
                  "buffer budget of {} bytes is spent.",
                  peer_, held, context_.options.maxBufferedBytes));
  closeSoon();
  return false;
}

bool Transport::reserve(std::size_t bytes) {
  // Reserved at once, so a batch of pipelined requests cannot each see the
  // budget as it was before the others took their share.
  return charge_.resize(charge_.bytes() + bytes);
}

bool Transport::reserveReply(std::size_t bytes) {
  return bytes <= context_.options.limits.maxFrameBytes && reserve(bytes);
}

bool Transport::detectDialect() {
  // docs/protocol.md "TCPStore dialects": the first bytes tell.
  const tcpstore::Opening opening = tcpstore::classifyOpening(input_.readable());
  if (opening == tcpstore::Opening::kNative) {
    session_ = std::make_unique<NativeSession>(*this);
    dialectCount_ = &context_.metrics.nativeConnections;
    ++*dialectCount_;
    return true;
  }
  if (opening == tcpstore::Opening::kUnknown) {
    reject(Status::kBadRequest,
           "it is not a ddprun client (the first bytes are not the DDPR preamble) nor a "
           "PyTorch TCPStore client");
    return false;
  }
  if (input_.readable().empty()) return true;
  if (context_.options.strict) {
    reject(Status::kAuthFailed,
           "it speaks PyTorch's TCPStore protocol, which cannot carry the token, and this "
           "server is strict");
    return false;
  }
  if (!context_.trusts(peerHost_)) {
    reject(Status::kAuthFailed,
           "it speaks PyTorch's TCPStore protocol, which carries no token, from an address where "
           "no agent of a job has joined (run the job through ddprun on that host, or list the "
           "address with --trusted-address)");
    return false;
  }
  if (opening == tcpstore::Opening::kNeedMore) return true;
  tcpstore::Dialect dialect = tcpstore::Dialect::kV1;
  if (opening == tcpstore::Opening::kTcpStoreV2) {
    dialect = tcpstore::Dialect::kV2;
    input_.consume(tcpstore::kValidateBytes);
  }
  session_ = std::make_unique<TcpStoreSession>(*this, dialect);
  dialectCount_ = &context_.metrics.tcpstoreConnections;
  ++*dialectCount_;
  DDPRUN_DEBUG("Client {} speaks TCPStore {}.", peer_,
               dialect == tcpstore::Dialect::kV1 ? "1.13" : "2.x");
  return true;
}

void Transport::reject(Status status, const std::string& reason) {
  context_.counters.rejected++;
  context_.rejectedLog.warn(fmt::format("Rejected client {}: {}.", peer_, reason));
  // Only a ddprun client can read an error frame; anyone else is just closed.
  if (session_ && session_->speaksErrorFrames()) protocol::encodeError(output_, 0, status, reason);
  closeAfterFlush();
}

void Transport::flush() {
  if (writing_ || output_.empty() || closed_ || closeQueued_) return;
  // Fast path: the socket nearly always takes the whole batch at once;
  // writing it here saves an asynchronous operation and its completion.
  boost::system::error_code writeError;
  const std::size_t written = socket_.write_some(asio::buffer(output_), writeError);
  if (writeError && writeError != asio::error::would_block &&
      writeError != asio::error::try_again) {
    closeSoon();
    return;
  }
  output_.erase(0, written);
  context_.metrics.bytesSent += written;
  if (output_.empty()) {
    drained_.cancel();
    if (closing_) {
      closeSoon();
      return;
    }
    // A large reply's buffer is not kept (nor charged) while idle, and what
    // a reply reserved is given back now: a reply sent from a callback (a
    // wait another client's SET completed) may not be followed by a read.
    if (output_.capacity() > kIdleBufferBytes) std::string().swap(output_);
    updateCharge();
    return;
  }
  writing_ = true;
  std::swap(output_, inFlight_);
  asio::async_write(socket_, asio::buffer(inFlight_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                      self->context_.metrics.bytesSent += n;
                      self->writing_ = false;
                      self->inFlight_.clear();
                      if (self->inFlight_.capacity() > kIdleBufferBytes) {
                        std::string().swap(self->inFlight_);
                      }
                      self->drained_.cancel();
                      if (ec) {
                        self->close();
                      } else if (self->closing_ && self->output_.empty()) {
                        self->close();
                      } else {
                        self->flush();
                        // Written replies give their budget back at once.
                        self->updateCharge();
                      }
                    });
}

void Transport::closeSoon() {
  if (closed_ || closeQueued_) return;
  closeQueued_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void Transport::closeAfterFlush() {
  closing_ = true;
  if (!writing_ && output_.empty()) {
    close();
  } else {
    flush();
  }
}

void Transport::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (session_) session_->closing(reason);
  context_.syncWaiters();
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  watchdogTimer_.cancel();
  drained_.cancel();
  context_.connections.erase(this);
  context_.counters.active--;
  if (dialectCount_ != nullptr) --*dialectCount_;
  if (!proven_) context_.unproven--;
  context_.budget.leave(peerHost_);
  // Everything it held goes now, not when the last handler lets go.
  input_.release();
  if (!writing_) std::string().swap(inFlight_);
  std::string().swap(output_);
  charge_.resize(0);
}

asio::awaitable<void> Transport::watchdog() {
  auto self = shared_from_this();
  const auto& options = context_.options;
  const auto deadline = [&] {
    if (!proven_) {
      // A silent connection may be a 1.13 TCPStore client's callback
      // socket, which must stay open (closing it makes the client spin):
      // from an address the server trusts it may. Everything else proves
      // itself within the handshake timeout.
      if (!bytesSeen_ && !options.strict && context_.trusts(peerHost_)) {
        return std::chrono::steady_clock::time_point::max();
      }
      return started_ + options.handshakeTimeout;
    }
    return session_->idleDeadline(lastActivity_);
  };
  while (!closed_ && !closing_) {
    watchdogTimer_.expires_at(deadline());
    co_await watchdogTimer_.async_wait(kAwait);
    if (closed_ || closing_) co_return;
    // Activity since the timer was armed moves the deadline, and so does a
    // pause of this process that only ends now: look again.
    const auto now = std::chrono::steady_clock::now();
    context_.pauses.turn(now);
    if (now < deadline()) continue;
    if (!proven_) {
      reject(Status::kBadRequest,
             bytesSeen_ ? fmt::format("it did not complete the handshake (or a first request) "
                                      "within {} ms",
                                      options.handshakeTimeout.count())
                        : fmt::format("it sent nothing within {} ms and is not from a trusted "
                                      "address",
                                      options.handshakeTimeout.count()));
      co_return;
    }
    session_->idleDeadlinePassed();
  }
}

}  // namespace ddprun::rendezvous
