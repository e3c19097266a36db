#include "session.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"

#include <cstring>

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using protocol::Op;
using protocol::Reply;
using protocol::Request;
using protocol::Status;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
// Before the handshake a frame may not be larger than this.
constexpr std::size_t kMaxHandshakeFrame = 64 * 1024;
// Stop reading from a client that does not read its replies.
constexpr std::size_t kMaxBufferedOutput = 128 * 1024 * 1024;
constexpr std::size_t kIdleInputCapacity = 64 * 1024;
// What a pending native wait costs beyond its keys' text.
constexpr std::size_t kPendingWaitBytes = 256;
constexpr std::size_t kPendingKeyBytes = 64;
// Keys only agents (the full token) may touch: the server's control keys.
constexpr std::string_view kControlPrefix = "__ddprun/";

bool isControlKey(std::string_view key) {
  return key.substr(0, kControlPrefix.size()) == kControlPrefix;
}

Status toStatus(StoreResult result) {
  switch (result) {
    case StoreResult::kOk:
      return Status::kOk;
    case StoreResult::kFull:
      return Status::kStoreFull;
    case StoreResult::kNotInteger:
      return Status::kNotInteger;
    case StoreResult::kValueTooLarge:
      return Status::kTooLarge;
  }
  return Status::kBadRequest;
}

const char* describe(StoreResult result) {
  switch (result) {
    case StoreResult::kOk:
      return "done";
    case StoreResult::kFull:
      return "the store is full";
    case StoreResult::kNotInteger:
      return "the value is not a decimal integer, or the sum leaves the 64-bit range";
    case StoreResult::kValueTooLarge:
      return "the value would pass the largest value allowed";
  }
  return "unknown";
}

}  // namespace

Session::Session(asio::ip::tcp::socket socket, ServerContext& context)
    : socket_(std::move(socket)),
      context_(context),
      peer_("unknown peer"),
      charge_(context.budget),
      started_(std::chrono::steady_clock::now()),
      lastActivity_(started_),
      watchdogTimer_(socket_.get_executor()),
      drained_(socket_.get_executor()) {
  boost::system::error_code ec;
  if (const auto endpoint = socket_.remote_endpoint(ec); !ec) {
    peerHost_ = endpoint.address().to_string();
    peer_ = fmt::format("{}:{}", peerHost_, endpoint.port());
  }
  socket_.non_blocking(true, ec);  // flush() writes directly when it can
  context_.sessions.insert(this);
  context_.counters.accepted++;
  context_.counters.active++;
  context_.unproven++;
}

Session::~Session() { close(); }

asio::awaitable<void> Session::run() {
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), watchdog(), asio::detached);
  while (!closed_ && !closing_) {
    if (bufferedOutput() > kMaxBufferedOutput) {
      // The client pipelines faster than it reads: wait for the writes.
      drained_.expires_at(std::chrono::steady_clock::time_point::max());
      co_await drained_.async_wait(kAwait);
      continue;
    }
    std::size_t space = 0;
    char* tail = input_.writable(0, space);
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(tail, space), kAwait);
    if (ec) {
      if (!authenticated_ && !closed_ && ec != asio::error::eof) {
        context_.counters.rejected++;
        DDPRUN_WARN("Rejected client {}: the connection failed before the handshake ({}).", peer_,
                    ec.message());
      }
      break;
    }
    input_.commit(n);
    lastActivity_ = std::chrono::steady_clock::now();
    if (!bytesSeen_) {
      bytesSeen_ = true;
      if (!proven_) watchdogTimer_.cancel();  // a silent socket spoke: re-arm the deadline
    }
    try {
      if (!processInput()) break;
    } catch (const std::bad_alloc&) {
      // Out of memory while handling this client's bytes: this connection
      // goes, with everything it held; the others carry on.
      warnLimited(context_.closedLog,
                  fmt::format("Closing the connection of {}: out of memory while handling its "
                              "request.",
                              peer_));
      close();
      break;
    }
    flush();
    if (!updateCharge()) break;
  }
  if (!closing_) close();
}

void Session::markProven() {
  if (proven_) return;
  proven_ = true;
  context_.unproven--;
  watchdogTimer_.cancel();  // re-arm for the idle limit
}

bool Session::updateCharge() {
  if (closed_) return false;
  const std::size_t held = input_.capacity() + (tcpDecoder_ ? tcpDecoder_->heldBytes() : 0) +
                           output_.capacity() + inFlight_.capacity() + waitBytes_;
  if (charge_.resize(held)) return true;
  warnLimited(context_.closedLog,
              fmt::format("Closing the connection of {}: it holds {} bytes and the server's "
                          "buffer budget of {} bytes is spent.",
                          peer_, held, context_.options.maxBufferedBytes));
  close();
  return false;
}

bool Session::reserveReply(std::size_t bytes) {
  // Reserved at once, so a batch of pipelined requests cannot each see the
  // budget as it was before the others' replies.
  return bytes <= context_.options.limits.maxFrameBytes && charge_.resize(charge_.bytes() + bytes);
}

void Session::warnLimited(LogLimiter& limiter, const std::string& message) {
  std::uint64_t suppressed = 0;
  if (!limiter.allow(suppressed)) return;
  if (suppressed > 0) {
    DDPRUN_WARN("{} ({} more like it were not logged.)", message, suppressed);
  } else {
    DDPRUN_WARN("{}", message);
  }
}

bool Session::detectDialect() {
  // docs/protocol.md "TCPStore dialects": the first bytes tell.
  const std::string_view data = input_.readable();
  if (data.empty()) return true;
  const auto first = static_cast<std::uint8_t>(data[0]);
  if (first == static_cast<std::uint8_t>(protocol::kPreamble[0])) {
    dialect_ = Dialect::kNative;
    return true;
  }
  if (first > 8) {
    reject(Status::kBadRequest,
           "it is not a ddprun client (the first bytes are not the DDPR preamble) nor a "
           "PyTorch TCPStore client");
    return false;
  }
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
  if (first == 0) {
    if (data.size() < 5) return true;
    std::uint32_t magic = 0;
    std::memcpy(&magic, data.data() + 1, sizeof(magic));
    if (magic == tcpstore::kValidateMagic) {
      dialect_ = Dialect::kTcpStoreV2;
      input_.consume(5);
    } else {
      dialect_ = Dialect::kTcpStoreV1;  // a 1.13 SET whose key length started
    }
  } else {
    dialect_ = Dialect::kTcpStoreV1;
  }
  const auto& limits = context_.options.limits;
  tcpDecoder_.emplace(
      dialect_ == Dialect::kTcpStoreV1 ? tcpstore::Dialect::kV1 : tcpstore::Dialect::kV2,
      tcpstore::DecoderLimits{limits.maxKeyBytes, limits.maxValueBytes, limits.maxKeysPerRequest,
                              limits.maxFrameBytes});
  authenticated_ = true;  // these dialects carry no token (see strict mode)
  DDPRUN_DEBUG("Client {} speaks TCPStore {}.", peer_,
               dialect_ == Dialect::kTcpStoreV1 ? "1.13" : "2.x");
  return true;
}

bool Session::processTcpStore() {
  for (;;) {
    tcpstore::Request r;
    std::size_t used = 0;
    std::string error;
    const tcpstore::Parse parse = tcpDecoder_->feed(input_.readable(), used, r, error);
    input_.consume(used);
    switch (parse) {
      case tcpstore::Parse::kNeedMore:
        if (input_.readable().empty()) input_.shrinkTo(kIdleInputCapacity);
        return true;
      case tcpstore::Parse::kError:
        warnLimited(context_.closedLog,
                    fmt::format("Closing the TCPStore connection of {}: {}.", peer_, error));
        close();
        return false;
      case tcpstore::Parse::kRequest:
        break;
    }
    markProven();
    context_.counters.requests++;
    for (const auto& key : r.keys) {
      if (!isControlKey(key)) continue;
      warnLimited(context_.closedLog,
                  fmt::format("Closing the TCPStore connection of {}: it named the control key "
                              "'{}', which only ddprun's agents may use.",
                              peer_, printable(key)));
      close();
      return false;
    }
    if (tcpWait_) {
      // The client serialises its calls: a new request means the pending
      // wait was abandoned (1.13 times out silently) or is being cancelled.
      context_.state.removeWaiter(*tcpWait_);
      tcpWait_.reset();
      tcpWaitTimer_.reset();
      context_.syncWaiters();
    }
    handleTcpStore(r);
    if (closed_) return false;
  }
}

void Session::handleTcpStore(tcpstore::Request& r) {
  using tcpstore::Op;
  StoreState& state = context_.state;
  std::string& out = output_;
  // This protocol has no error reply: a write the store refuses closes the
  // connection, so the client sees an error instead of a lost write.
  const auto refused = [&](StoreResult result) {
    if (result == StoreResult::kOk) return false;
    warnLimited(context_.closedLog,
                fmt::format("Closing the TCPStore connection of {}: a write was refused ({}).",
                            peer_, describe(result)));
    close();
    return true;
  };
  // Replies are sized before they are built: one too large for the frame
  // limit or the server's budget closes the connection (no error reply).
  const auto tooLarge = [&](std::size_t bytes) {
    if (reserveReply(bytes)) return false;
    warnLimited(context_.closedLog,
                fmt::format("Closing the TCPStore connection of {}: its reply would be {} "
                            "bytes, over the frame limit or the server's buffer budget.",
                            peer_, bytes));
    close();
    return true;
  };
  const auto valueBytes = [&](const std::string& key) {
    const std::string* value = state.find(key);
    return 8 + (value ? value->size() : 0);
  };
  switch (r.op) {
    case Op::kValidate:
      break;  // only valid first; a repeat is harmless
    case Op::kPing:
      tcpstore::putU32(out, r.word);
      break;
    case Op::kSet:
      if (refused(state.set(r.keys[0], std::move(r.values[0])))) return;
      break;
    case Op::kAppend:
      if (refused(state.append(r.keys[0], r.values[0]))) return;
      break;
    case Op::kCompareSet: {
      std::string result;
      if (refused(state.compareSet(r.keys[0], r.values[0], std::move(r.values[1]), result))) {
        return;
      }
      tcpstore::putString(out, result);
      break;
    }
    case Op::kGet: {
      if (tooLarge(valueBytes(r.keys[0]))) return;
      const std::string* value = state.find(r.keys[0]);
      tcpstore::putString(out, value ? *value : std::string());
      break;
    }
    case Op::kAdd: {
      std::int64_t result = 0;
      if (refused(state.add(r.keys[0], r.delta, result))) return;
      tcpstore::putI64(out, result);
      break;
    }
    case Op::kCheck:
      tcpstore::putU8(out, state.check(r.keys) ? tcpstore::kReady : tcpstore::kNotReady);
      break;
    case Op::kWait: {
      std::optional<StoreState::WaiterId> waiter;
      const StoreResult added = state.addWaiter(
          r.keys,
          [this] {
            tcpWait_.reset();
            tcpWaitTimer_.reset();
            context_.syncWaiters();
            tcpstore::putU8(output_, tcpstore::kStopWaiting);
            flush();
          },
          waiter);
      if (refused(added)) return;
      if (waiter) {
        tcpWait_ = *waiter;
        context_.syncWaiters();
        startTcpStoreWaitTimer();
      } else {
        tcpstore::putU8(out, tcpstore::kStopWaiting);
      }
      break;
    }
    case Op::kCancelWait:
      // Any pending wait was dropped above; if it had completed, its
      // STOP_WAITING already went out and this 01 follows it.
      tcpstore::putU8(out, tcpstore::kWaitCanceled);
      break;
    case Op::kGetNumKeys:
      tcpstore::putI64(out, state.numKeys());
      break;
    case Op::kDeleteKey:
      tcpstore::putI64(out, state.deleteKey(r.keys[0]) ? 1 : 0);
      break;
    case Op::kMultiGet: {
      std::size_t bytes = 0;
      for (const auto& key : r.keys) bytes += valueBytes(key);
      if (tooLarge(bytes)) return;
      for (const auto& key : r.keys) {
        const std::string* value = state.find(key);
        tcpstore::putString(out, value ? *value : std::string());
      }
      break;
    }
    case Op::kMultiSet:
      if (refused(state.multiSet(r.keys, r.values))) return;
      break;
    case Op::kListKeys: {
      std::vector<std::string> keys = state.keys();
      std::erase_if(keys, [](const std::string& key) { return isControlKey(key); });
      std::size_t bytes = 8;
      for (const auto& key : keys) bytes += 8 + key.size();
      if (tooLarge(bytes)) return;
      tcpstore::putI64(out, static_cast<std::int64_t>(keys.size()));
      for (const auto& key : keys) tcpstore::putString(out, key);
      break;
    }
    case Op::kWatchKey:
      warnLimited(
          context_.closedLog,
          fmt::format("Closing the TCPStore connection of {}: WATCH_KEY is not supported.", peer_));
      close();
      return;
  }
}

bool Session::processInput() {
  if (dialect_ == Dialect::kUnknown) {
    if (!detectDialect()) return false;
    if (dialect_ == Dialect::kUnknown) return true;  // need more bytes
  }
  if (dialect_ != Dialect::kNative) return processTcpStore();
  for (;;) {
    std::string_view data = input_.readable();
    if (!preambleSeen_) {
      const auto& magic = protocol::kPreamble;
      const std::size_t n = std::min(data.size(), magic.size());
      if (data.substr(0, n) != magic.substr(0, n)) {
        reject(Status::kBadRequest,
               "it is not a ddprun client (the first bytes are not the DDPR preamble)");
        return false;
      }
      if (n < magic.size()) return true;
      input_.consume(magic.size());
      preambleSeen_ = true;
      continue;
    }
    protocol::FrameHeader header;
    const std::size_t maxFrame =
        authenticated_ ? context_.options.limits.maxFrameBytes : kMaxHandshakeFrame;
    switch (protocol::parseFrameHeader(data, maxFrame, header)) {
      case protocol::ParseResult::kNeedMore:
        if (data.size() >= protocol::kHeaderSize) {
          // The frame and the read slack (run() reads into at least 4 KiB).
          const std::size_t frame = protocol::kHeaderSize + header.bodySize + 4096;
          if (frame > input_.capacity() && !charge_.canGrow(frame - input_.capacity())) {
            warnLimited(context_.closedLog,
                        fmt::format("Closing the connection of {}: its frame of {} bytes does "
                                    "not fit the server's buffer budget now.",
                                    peer_, frame));
            sendError(header.requestId, Status::kTooLarge,
                      "the server's buffer budget is spent; retry later");
            closeAfterFlush();
            return false;
          }
          input_.reserveExactly(frame);
        }
        return true;
      case protocol::ParseResult::kTooLarge: {
        const std::string message = fmt::format("a frame of {} bytes is over the limit of {} bytes",
                                                header.bodySize, maxFrame);
        if (!authenticated_) {
          reject(Status::kTooLarge, message);
        } else {
          warnLimited(context_.closedLog,
                      fmt::format("Closing the connection of {}: {}.", peer_, message));
          sendError(header.requestId, Status::kTooLarge, message);
          closeAfterFlush();
        }
        return false;
      }
      case protocol::ParseResult::kFrame:
        break;
    }
    handleFrame(header, data.substr(protocol::kHeaderSize, header.bodySize));
    input_.consume(protocol::kHeaderSize + header.bodySize);
    if (closed_ || closing_) return false;
    if (input_.readable().empty()) input_.shrinkTo(kIdleInputCapacity);
  }
}

void Session::handleFrame(const protocol::FrameHeader& header, std::string_view body) {
  Request request;
  const auto error = protocol::decodeRequest(header.code, body, context_.options.limits, request);
  if (!authenticated_) {
    if (!error.ok()) {
      reject(error.status, error.message);
    } else if (request.op != Op::kHello) {
      reject(Status::kBadRequest,
             fmt::format("it sent {} before HELLO", protocol::opName(request.op)));
    } else {
      handleHello(header.requestId, request);
    }
    return;
  }
  context_.counters.requests++;
  if (!error.ok()) {
    // The framing is intact, so the connection can go on after the error.
    sendError(header.requestId, error.status, error.message);
    return;
  }
  if (header.requestId == 0) {
    sendError(0, Status::kBadRequest, "request id 0 is reserved for server pushes");
    return;
  }
  handleRequest(header.requestId, request);
}

void Session::handleHello(std::uint32_t id, const Request& request) {
  if (request.version < 1 || request.version > protocol::kVersion) {
    reject(Status::kUnsupportedVersion,
           fmt::format("it speaks protocol version {} and this server speaks 1 to {}; "
                       "use a ddprun client of the same release",
                       request.version, protocol::kVersion));
    return;
  }
  // An open store (no token configured) serves every client as an agent.
  // Otherwise the agents' token, or a worker credential made from it.
  const std::string& token = context_.options.token;
  const std::string& sent = request.values.at(0);
  if (!token.empty() && !constantTimeEquals(sent, token)) {
    if (auto job = workerCredentialJob(sent, token)) {
      role_ = Role::kWorker;
      workerJob_ = std::move(*job);
    } else {
      reject(Status::kAuthFailed,
             sent.empty()
                 ? "it sent no token and this store requires one; export the same DDPRUN_TOKEN "
                   "(or token file) on every node"
                 : "its token is wrong; give every node the same DDPRUN_TOKEN (or token file)");
      return;
    }
  }
  authenticated_ = true;
  markProven();
  Reply reply;
  reply.version = request.version;
  reply.values.push_back(context_.options.name);
  sendOk(id, Op::kHello, reply);
  DDPRUN_DEBUG("Client {} ({}) connected.", printable(request.keys.at(0)), peer_);
}

bool Session::mayUse(std::uint32_t id, const Request& r) {
  for (const auto& key : r.keys) {
    if (isControlKey(key) && role_ != Role::kAgent) {
      sendError(id, Status::kAuthFailed,
                fmt::format("key '{}' is one of ddprun's control keys, which only agents (the "
                            "full token) may use",
                            printable(key)));
      return false;
    }
    if (role_ == Role::kWorker &&
        (key.size() <= workerJob_.size() || key.compare(0, workerJob_.size(), workerJob_) != 0 ||
         key[workerJob_.size()] != '/')) {
      sendError(id, Status::kAuthFailed,
                fmt::format("key '{}' is outside this worker's job: a worker credential reaches "
                            "only keys under '{}/'",
                            printable(key), printable(workerJob_)));
      return false;
    }
  }
  return true;
}

void Session::handleRequest(std::uint32_t id, Request& r) {
  StoreState& state = context_.state;
  Reply reply;
  Status status = Status::kOk;
  if (!mayUse(id, r)) return;
  switch (r.op) {
    case Op::kHello:
      sendError(id, Status::kBadRequest, "HELLO was already sent on this connection");
      return;
    case Op::kSet:
      status = toStatus(state.set(r.keys[0], std::move(r.values[0])));
      break;
    case Op::kAppend:
      status = toStatus(state.append(r.keys[0], r.values[0]));
      break;
    case Op::kAdd:
      status = toStatus(state.add(r.keys[0], r.delta, reply.integer));
      if (status == Status::kNotInteger) {
        sendError(id, status,
                  fmt::format("ADD on key '{}' failed: its value is not a decimal integer, or "
                              "the sum leaves the 64-bit range",
                              r.keys[0]));
        return;
      }
      break;
    case Op::kCompareSet:
      reply.values.emplace_back();
      status = toStatus(
          state.compareSet(r.keys[0], r.values[0], std::move(r.values[1]), reply.values[0]));
      break;
    case Op::kCheck:
      reply.flag = state.check(r.keys);
      break;
    case Op::kDeleteKey:
      reply.flag = state.deleteKey(r.keys[0]);
      break;
    case Op::kNumKeys:
      reply.integer = state.numKeys();
      break;
    case Op::kMultiSet:
      status = toStatus(state.multiSet(r.keys, r.values));
      break;
    case Op::kPing:
      reply.values.push_back(std::move(r.values[0]));
      break;
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet:
      startWait(id, r);
      return;
    case Op::kJoin:
    case Op::kLeave:
    case Op::kReportFailure:
    case Op::kRendezvousStatus:
      handleRendezvous(id, r);
      return;
  }
  sendStatus(id, r.op, status, reply);
}

void Session::handleRendezvous(std::uint32_t id, Request& r) {
  if (role_ != Role::kAgent) {
    sendError(id, Status::kAuthFailed,
              "a worker credential cannot take part in the rendezvous (only agents can join, "
              "leave or report failures)");
    return;
  }
  RendezvousManager* rendezvous = context_.rendezvous;
  if (rendezvous == nullptr) {
    protocol::encodeClosed(output_, id, "the server is shutting down", {1, ""});
    return;
  }
  Reply reply;
  std::string message;
  Status status = Status::kOk;
  switch (r.op) {
    case Op::kJoin:
      if (r.join.keepAliveMs > 0) {
        keepAlive_ = std::max(keepAlive_, std::chrono::milliseconds(r.join.keepAliveMs));
        watchdogTimer_.cancel();  // re-arm with the heartbeat limit
      }
      ++pendingJoins_;
      if (!member_) {
        // An agent has joined from this address: its workers' TCPStore
        // clients (which cannot authenticate) may be served from here.
        member_ = true;
        context_.memberAddresses[peerHost_]++;
      }
      rendezvous->join(*this, id, r.join, r.timeoutMs);
      return;
    case Op::kLeave:
      status = rendezvous->leave(*this, r.node, message);
      break;
    case Op::kReportFailure:
      status = rendezvous->reportFailure(*this, r.node, reply.integer, reply.flag, message);
      break;
    case Op::kRendezvousStatus:
      reply.rendezvous = rendezvous->status(r.rdzvId);
      break;
    default:
      return;
  }
  if (status == Status::kOk) {
    sendOk(id, r.op, reply);
  } else {
    sendError(id, status, message);
  }
}

void Session::answerJoin(std::uint32_t requestId, Status status,
                         const protocol::Assignment& assignment, const std::string& message) {
  if (closed_) return;
  if (pendingJoins_ > 0) --pendingJoins_;
  lastActivity_ = std::chrono::steady_clock::now();
  if (status == Status::kOk) {
    Reply reply;
    reply.assignment = assignment;
    sendOk(requestId, Op::kJoin, reply);
  } else {
    sendError(requestId, status, message);
  }
  flush();
}

void Session::answerClosed(std::uint32_t requestId, const protocol::JobFailure& failure) {
  if (closed_) return;
  if (pendingJoins_ > 0) --pendingJoins_;
  protocol::encodeClosed(output_, requestId, "the rendezvous is closed: the job failed", failure);
  flush();
}

void Session::pushEvent(const protocol::Event& event) {
  if (closed_) return;
  protocol::encodeEvent(output_, event);
  flush();
}

void Session::startWait(std::uint32_t id, Request& r) {
  if (waits_.contains(id)) {
    sendError(id, Status::kBadRequest,
              fmt::format("request id {} already has a pending wait on this connection", id));
    return;
  }
  PendingWait wait;
  wait.op = r.op;
  wait.keys = std::move(r.keys);
  wait.bytes = kPendingWaitBytes;
  for (const auto& key : wait.keys) wait.bytes += key.size() + kPendingKeyBytes;
  if (!charge_.canGrow(wait.bytes)) {
    sendError(id, Status::kStoreFull,
              fmt::format("{} refused: the server's buffer budget of {} bytes is spent",
                          protocol::opName(r.op), context_.options.maxBufferedBytes));
    return;
  }
  std::optional<StoreState::WaiterId> waiter;
  if (context_.state.addWaiter(
          wait.keys, [this, id] { completeWait(id); }, waiter) != StoreResult::kOk) {
    sendStatus(id, r.op, Status::kStoreFull, {});
    return;
  }
  waitBytes_ += wait.bytes;
  if (!waiter) {
    waits_.emplace(id, std::move(wait));
    completeWait(id);
    return;
  }
  wait.waiter = *waiter;
  context_.syncWaiters();
  // Every wait ends: "no timeout" and long timeouts stop at maxWaitTime.
  const auto maxWait = context_.options.maxWaitTime;
  const auto timeout =
      r.timeoutMs == protocol::kNoTimeout
          ? maxWait
          : std::min<std::chrono::milliseconds>(maxWait, std::chrono::milliseconds(r.timeoutMs));
  wait.timer = std::make_unique<asio::steady_timer>(socket_.get_executor(), timeout);
  wait.timer->async_wait([self = shared_from_this(), id](boost::system::error_code ec) {
    if (!ec) self->timeoutWait(id);
  });
  waits_.emplace(id, std::move(wait));
}

void Session::completeWait(std::uint32_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return;
  if (!context_.state.check(it->second.keys)) {
    // A key that existed when the wait began was deleted since: wait on.
    // (A full store ends the wait now: the caller sees the key missing.)
    std::optional<StoreState::WaiterId> waiter;
    context_.state.addWaiter(
        it->second.keys, [this, id] { completeWait(id); }, waiter);
    if (waiter) {
      it->second.waiter = *waiter;
      return;
    }
  }
  PendingWait wait = std::move(it->second);
  waits_.erase(it);
  waitBytes_ -= wait.bytes;
  context_.syncWaiters();
  if (wait.timer) wait.timer->cancel();
  lastActivity_ = std::chrono::steady_clock::now();
  Reply reply;
  if (wait.op != Op::kWait) {
    // Sized before it is built: a reply over the frame limit or the
    // server's budget (say, one large key named a thousand times) is an
    // error, never gigabytes of memory.
    std::size_t bytes = protocol::kHeaderSize + 4;
    for (const auto& key : wait.keys) {
      const std::string* value = context_.state.find(key);
      bytes += 4 + (value ? value->size() : 0);
    }
    if (!reserveReply(bytes)) {
      sendError(
          id, Status::kTooLarge,
          fmt::format("the {} reply would be {} bytes, over the frame limit of {} bytes or "
                      "what the server can buffer now; ask for fewer keys at a time",
                      protocol::opName(wait.op), bytes, context_.options.limits.maxFrameBytes));
      flush();
      return;
    }
    for (const auto& key : wait.keys) {
      const std::string* value = context_.state.find(key);
      reply.values.push_back(value ? *value : std::string());
    }
  }
  sendOk(id, wait.op, reply);
  flush();
}

void Session::timeoutWait(std::uint32_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return;
  context_.state.removeWaiter(it->second.waiter);
  std::string missing;
  for (const auto& key : it->second.keys) {
    if (context_.state.find(key) != nullptr) continue;
    if (!missing.empty()) missing += "', '";
    missing += key;
  }
  const Op op = it->second.op;
  waitBytes_ -= it->second.bytes;
  waits_.erase(it);
  context_.syncWaiters();
  sendError(id, Status::kTimeout,
            fmt::format("{} timed out waiting for key '{}'", protocol::opName(op), missing));
  flush();
}

void Session::sendOk(std::uint32_t id, Op op, const Reply& reply) {
  protocol::encodeReply(output_, id, op, reply);
}

void Session::sendStatus(std::uint32_t id, Op op, Status status, const Reply& reply) {
  switch (status) {
    case Status::kOk:
      sendOk(id, op, reply);
      return;
    case Status::kStoreFull:
      sendError(
          id, status,
          fmt::format("{} refused: the store would exceed its limit of {} bytes (keys, "
                      "values, a {}-byte overhead per key, and waiters)",
                      protocol::opName(op), context_.options.maxTotalBytes, kKeyOverheadBytes));
      return;
    case Status::kTooLarge:
      sendError(id, status,
                fmt::format("{} refused: the value would exceed the limit of {} bytes",
                            protocol::opName(op), context_.options.limits.maxValueBytes));
      return;
    default:
      sendError(id, status,
                fmt::format("{} failed: {}", protocol::opName(op), protocol::statusName(status)));
      return;
  }
}

void Session::sendError(std::uint32_t id, Status status, std::string_view message) {
  protocol::encodeError(output_, id, status, message);
}

void Session::reject(Status status, const std::string& reason) {
  context_.counters.rejected++;
  warnLimited(context_.rejectedLog, fmt::format("Rejected client {}: {}.", peer_, reason));
  // Only a ddprun client can read an error frame; anyone else is just closed.
  if (dialect_ == Dialect::kNative) sendError(0, status, reason);
  closeAfterFlush();
}

void Session::flush() {
  if (writing_ || output_.empty() || closed_) return;
  // Fast path: the socket nearly always takes the whole batch at once;
  // writing it here saves an asynchronous operation and its completion.
  boost::system::error_code writeError;
  const std::size_t written = socket_.write_some(asio::buffer(output_), writeError);
  if (writeError && writeError != asio::error::would_block &&
      writeError != asio::error::try_again) {
    close();
    return;
  }
  output_.erase(0, written);
  if (output_.empty()) {
    drained_.cancel();
    if (closing_) {
      close();
      return;
    }
    // A large reply's buffer is not kept (nor charged) while idle.
    if (output_.capacity() > kIdleInputCapacity) std::string().swap(output_);
    return;
  }
  writing_ = true;
  std::swap(output_, inFlight_);
  asio::async_write(socket_, asio::buffer(inFlight_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      self->writing_ = false;
                      self->inFlight_.clear();
                      if (self->inFlight_.capacity() > kIdleInputCapacity) {
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

void Session::closeAfterFlush() {
  closing_ = true;
  if (!writing_ && output_.empty()) {
    close();
  } else {
    flush();
  }
}

void Session::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (context_.rendezvous != nullptr) context_.rendezvous->peerLost(*this, reason);
  if (tcpWait_) context_.state.removeWaiter(*tcpWait_);
  tcpWait_.reset();
  tcpWaitTimer_.reset();
  for (auto& [id, wait] : waits_) {
    context_.state.removeWaiter(wait.waiter);
    if (wait.timer) wait.timer->cancel();
  }
  waits_.clear();
  context_.syncWaiters();
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  watchdogTimer_.cancel();
  drained_.cancel();
  context_.sessions.erase(this);
  context_.counters.active--;
  if (!proven_) context_.unproven--;
  if (member_) {
    auto it = context_.memberAddresses.find(peerHost_);
    if (it != context_.memberAddresses.end() && --it->second == 0) {
      context_.memberAddresses.erase(it);
    }
  }
  context_.budget.leave(peerHost_);
  // Everything it held goes now, not when the last handler lets go.
  input_.release();
  if (!writing_) std::string().swap(inFlight_);
  std::string().swap(output_);
  waitBytes_ = 0;
  charge_.resize(0);
}

void Session::startTcpStoreWaitTimer() {
  tcpWaitTimer_ =
      std::make_unique<asio::steady_timer>(socket_.get_executor(), context_.options.maxWaitTime);
  tcpWaitTimer_->async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->closed_ || !self->tcpWait_) return;
    self->warnLimited(self->context_.closedLog,
                      fmt::format("Closing the TCPStore connection of {}: its WAIT passed the "
                                  "server's longest wait of {} ms.",
                                  self->peer_, self->context_.options.maxWaitTime.count()));
    self->close();
  });
}

asio::awaitable<void> Session::watchdog() {
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
    auto when = std::chrono::steady_clock::time_point::max();
    if (dialect_ != Dialect::kNative) return when;  // TCPStore: no idle goodbye
    if (options.idleTimeout.count() > 0) when = lastActivity_ + options.idleTimeout;
    if (keepAlive_.count() > 0) when = std::min(when, lastActivity_ + keepAlive_);
    return when;
  };
  while (!closed_ && !closing_) {
    watchdogTimer_.expires_at(deadline());
    co_await watchdogTimer_.async_wait(kAwait);
    if (closed_ || closing_) co_return;
    // Activity since the timer was armed moves the deadline: look again.
    if (std::chrono::steady_clock::now() < deadline()) continue;
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
    if (keepAlive_.count() > 0) {
      // A rendezvous member heartbeats; silence means the node is gone
      // (stopped, cut off, or its host died without closing the socket).
      DDPRUN_WARN("Closing the connection of {}: no heartbeat for {} ms.", peer_,
                  keepAlive_.count());
      close(fmt::format("no heartbeat for {} ms", keepAlive_.count()));
      co_return;
    }
    if (!waits_.empty() || pendingJoins_ > 0 || bufferedOutput() > 0) {
      lastActivity_ = std::chrono::steady_clock::now();  // busy, not idle
      continue;
    }
    DDPRUN_INFO("Closing the connection of {}: idle for {} ms.", peer_,
                options.idleTimeout.count());
    sendError(0, Status::kGoodbye,
              fmt::format("idle for {} ms; reconnect to continue", options.idleTimeout.count()));
    closeAfterFlush();
    co_return;
  }
}

}  // namespace ddprun::rendezvous
