#include "native_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/logging.h"
#include "server_context.h"
#include "transport.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using protocol::Op;
using protocol::Request;
using protocol::Status;

namespace {

// Before the handshake a frame may not be larger than this.
constexpr std::size_t kMaxHandshakeFrame = 64 * 1024;
// What a pending wait costs beyond its keys' text.
constexpr std::size_t kPendingWaitBytes = 256;
constexpr std::size_t kPendingKeyBytes = 64;

// std::visit over lambdas, one per message type.
template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};

}  // namespace

NativeSession::NativeSession(Transport& transport)
    : transport_(transport), context_(transport.context()) {}

const std::string& NativeSession::peerAddress() const { return transport_.peerHost(); }

void NativeSession::closing(const std::string& reason) {
  if (context_.rendezvous != nullptr) {
    // A node that gave up on the store while this process was paused: its
    // loss is named with the pause (noticed here if this runs first).
    const auto now = Clock::now();
    context_.pauses.turn(now);
    context_.rendezvous->peerLost(
        *this, reason + context_.pauses.recentPauseNote(now, LoopPauses::kNoticeable * 2));
  }
  for (auto& [id, wait] : waits_) {
    context_.state.removeWaiter(wait.waiter);
    if (wait.timer) wait.timer->cancel();
  }
  waits_.clear();
  waitBytes_ = 0;
  if (member_) {
    auto it = context_.memberAddresses.find(transport_.peerHost());
    if (it != context_.memberAddresses.end() && --it->second == 0) {
      context_.memberAddresses.erase(it);
    }
    member_ = false;
  }
}

DialectSession::Clock::time_point NativeSession::idleDeadline(
    Clock::time_point lastActivity) const {
  auto when = Clock::time_point::max();
  const auto idle = context_.options.idleTimeout;
  if (idle.count() > 0) when = lastActivity + idle;
  // A member's silence counts from the end of this process's last pause.
  if (keepAlive_.count() > 0) {
    when = std::min(when, std::max(lastActivity, context_.pauses.resumedAt()) + keepAlive_);
  }
  return when;
}

void NativeSession::idleDeadlinePassed() {
  const auto idle = context_.options.idleTimeout;
  if (keepAlive_.count() > 0) {
    // A rendezvous member heartbeats; silence means the node is gone
    // (stopped, cut off, or its host died without closing the socket).
    DDPRUN_WARN("Closing the connection of {}: no heartbeat for {} ms.", transport_.peer(),
                keepAlive_.count());
    transport_.close(fmt::format("no heartbeat for {} ms", keepAlive_.count()));
    return;
  }
  if (!waits_.empty() || pendingJoins_ > 0 || transport_.bufferedOutput() > 0) {
    transport_.touch();  // busy, not idle
    return;
  }
  DDPRUN_INFO("Closing the connection of {}: idle for {} ms.", transport_.peer(), idle.count());
  sendError(0, Status::kGoodbye,
            fmt::format("idle for {} ms; reconnect to continue", idle.count()));
  transport_.closeAfterFlush();
}

bool NativeSession::process() {
  for (;;) {
    std::string_view data = transport_.input().readable();
    if (!preambleSeen_) {
      const auto& magic = protocol::kPreamble;
      const std::size_t n = std::min(data.size(), magic.size());
      if (data.substr(0, n) != magic.substr(0, n)) {
        transport_.reject(Status::kBadRequest,
                          "it is not a ddprun client (the first bytes are not the DDPR preamble)");
        return false;
      }
      if (n < magic.size()) return true;
      transport_.input().consume(magic.size());
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
          if (frame > transport_.input().capacity() &&
              !transport_.reserve(frame - transport_.input().capacity())) {
            context_.closedLog.warn(
                fmt::format("Closing the connection of {}: its frame of {} bytes does "
                            "not fit the server's buffer budget now.",
                            transport_.peer(), frame));
            sendError(header.requestId, Status::kTooLarge,
                      "the server's buffer budget is spent; retry later");
            transport_.closeAfterFlush();
            return false;
          }
          transport_.input().reserveExactly(frame);
        }
        return true;
      case protocol::ParseResult::kTooLarge: {
        const std::string message = fmt::format("a frame of {} bytes is over the limit of {} bytes",
                                                header.bodySize, maxFrame);
        if (!authenticated_) {
          transport_.reject(Status::kTooLarge, message);
        } else {
          context_.closedLog.warn(
              fmt::format("Closing the connection of {}: {}.", transport_.peer(), message));
          sendError(header.requestId, Status::kTooLarge, message);
          transport_.closeAfterFlush();
        }
        return false;
      }
      case protocol::ParseResult::kFrame:
        break;
    }
    handleFrame(header, data.substr(protocol::kHeaderSize, header.bodySize));
    transport_.input().consume(protocol::kHeaderSize + header.bodySize);
    if (transport_.closed() || transport_.closing()) return false;
    if (transport_.input().readable().empty()) transport_.input().shrinkTo(kIdleBufferBytes);
  }
}

void NativeSession::handleFrame(const protocol::FrameHeader& header, std::string_view body) {
  Request request;
  const auto error = protocol::decodeRequest(header.code, body, context_.options.limits, request);
  if (!authenticated_) {
    if (!error.ok()) {
      transport_.reject(error.status, error.message);
    } else if (const auto* hello = std::get_if<protocol::Hello>(&request)) {
      handleHello(header.requestId, *hello);
    } else {
      transport_.reject(
          Status::kBadRequest,
          fmt::format("it sent {} before HELLO", protocol::opName(protocol::opOf(request))));
    }
    return;
  }
  context_.counters.requests++;
  context_.metrics.nativeOperations[protocol::opName(protocol::opOf(request))]++;
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

void NativeSession::handleHello(std::uint32_t id, const protocol::Hello& hello) {
  const protocol::HelloVerdict verdict = protocol::judgeHello(hello, context_.options.token);
  if (verdict.status != Status::kOk) {
    transport_.reject(verdict.status, verdict.message);
    return;
  }
  if (!verdict.agent) {
    role_ = Role::kWorker;
    workerJob_ = verdict.workerJob;
  }
  authenticated_ = true;
  transport_.markProven();
  protocol::encodeReply(transport_.output(), id,
                        protocol::HelloReply{hello.version, context_.options.name});
  DDPRUN_DEBUG("Client {} ({}) connected.", printable(hello.clientName), transport_.peer());
}

bool NativeSession::mayUse(std::uint32_t id, const Request& request) {
  return protocol::allStoreKeys(request, [&](std::string_view key) {
    const std::string refusal =
        protocol::keyRefusal(key, role_ == Role::kAgent, role_ == Role::kWorker ? workerJob_ : "");
    if (refusal.empty()) return true;
    sendError(id, Status::kAuthFailed, refusal);
    return false;
  });
}

void NativeSession::handleRequest(std::uint32_t id, Request& request) {
  if (!mayUse(id, request)) return;
  StoreState& state = context_.state;
  std::visit(
      Overloaded{
          [&](protocol::Hello&) {
            sendError(id, Status::kBadRequest, "HELLO was already sent on this connection");
          },
          [&](protocol::Set& m) {
            answer<protocol::Set>(id, state.set(m.key, std::move(m.value)));
          },
          [&](protocol::Append& m) { answer<protocol::Append>(id, state.append(m.key, m.value)); },
          [&](protocol::Add& m) {
            protocol::IntegerReply sum;
            const StoreResult result = state.add(m.key, m.delta, sum.value);
            if (result == StoreResult::kNotInteger) {
              sendError(id, Status::kNotInteger,
                        fmt::format("ADD on key '{}' failed: its value is not a decimal integer, "
                                    "or the sum leaves the 64-bit range",
                                    printable(m.key)));
              return;
            }
            answer<protocol::Add>(id, result, sum);
          },
          [&](protocol::CompareSet& m) {
            protocol::ValueReply now;
            const StoreResult result =
                state.compareSet(m.key, m.expected, std::move(m.desired), now.value);
            answer<protocol::CompareSet>(id, result, now);
          },
          [&](protocol::Check& m) {
            answer<protocol::Check>(id, StoreResult::kOk, {state.check(m.keys)});
          },
          [&](protocol::DeleteKey& m) {
            answer<protocol::DeleteKey>(id, StoreResult::kOk, {state.deleteKey(m.key)});
          },
          [&](protocol::NumKeys&) {
            answer<protocol::NumKeys>(id, StoreResult::kOk, {state.numKeys()});
          },
          [&](protocol::MultiSet& m) {
            answer<protocol::MultiSet>(id, state.multiSet(m.keys, m.values));
          },
          [&](protocol::Ping& m) {
            answer<protocol::Ping>(id, StoreResult::kOk, {std::move(m.payload)});
          },
          [&](protocol::QueuePush& m) {
            answer<protocol::QueuePush>(id, state.queuePush(m.key, std::move(m.value)));
          },
          [&](protocol::QueuePop& m) {
            const std::size_t front = state.queueFrontBytes(m.key);
            if (!transport_.reserveReply(protocol::kHeaderSize + 12 + front)) {
              sendError(id, Status::kTooLarge,
                        fmt::format("the QUEUE_POP reply would be {} bytes, over what the server "
                                    "can buffer now",
                                    front));
              return;
            }
            protocol::QueuePopReply reply;
            reply.length = state.queuePop(m.key, reply.value);
            answer<protocol::QueuePop>(id, StoreResult::kOk, reply);
          },
          [&](protocol::QueueLen& m) {
            answer<protocol::QueueLen>(id, StoreResult::kOk, {state.queueLen(m.key)});
          },
          [&](protocol::ListKeys&) { listKeys(id); },
          [&](protocol::Barrier& m) { startBarrier(id, m); },
          [&](protocol::SharedWait& m) {
            startWait(id, Op::kSharedWait, std::move(m.keys), m.timeoutMs);
          },
          [&](protocol::Cancel& m) {
            answer<protocol::Cancel>(id, StoreResult::kOk, {dropWait(m.requestId)});
          },
          [&](protocol::Get& m) { startWait(id, Op::kGet, {std::move(m.key)}, m.timeoutMs); },
          [&](protocol::Wait& m) { startWait(id, Op::kWait, std::move(m.keys), m.timeoutMs); },
          [&](protocol::MultiGet& m) {
            startWait(id, Op::kMultiGet, std::move(m.keys), m.timeoutMs);
          },
          [&](protocol::JoinRequest&) { handleRendezvous(id, request); },
          [&](protocol::Leave&) { handleRendezvous(id, request); },
          [&](protocol::ReportFailure&) { handleRendezvous(id, request); },
          [&](protocol::RendezvousStatusQuery&) { handleRendezvous(id, request); },
      },
      request);
}

void NativeSession::handleRendezvous(std::uint32_t id, Request& request) {
  if (role_ != Role::kAgent) {
    sendError(id, Status::kAuthFailed,
              "a worker credential cannot take part in the rendezvous (only agents can join, "
              "leave or report failures)");
    return;
  }
  RendezvousManager* rendezvous = context_.rendezvous;
  if (rendezvous == nullptr) {
    protocol::encodeClosed(transport_.output(), id, "the server is shutting down", {1, ""});
    return;
  }
  std::string message;
  // LEAVE and REPORT_FAILURE: the manager's verdict, then the typed reply.
  auto reply = [&](Status status, const auto& body) {
    if (status == Status::kOk) {
      protocol::encodeReply(transport_.output(), id, body);
    } else {
      sendError(id, status, message);
    }
  };
  std::visit(Overloaded{
                 [&](protocol::JoinRequest& join) {
                   if (join.keepAliveMs > 0) {
                     keepAlive_ = std::max(keepAlive_, std::chrono::milliseconds(join.keepAliveMs));
                     transport_.rearmDeadline();  // with the heartbeat limit
                   }
                   ++pendingJoins_;
                   if (!member_) {
                     // An agent has joined from this address: its workers' TCPStore
                     // clients (which cannot authenticate) may be served from here.
                     member_ = true;
                     context_.memberAddresses[transport_.peerHost()]++;
                   }
                   rendezvous->join(*this, id, join);
                 },
                 [&](protocol::Leave& leave) {
                   const Status status = rendezvous->leave(*this, leave.node, message);
                   reply(status, protocol::Leave::Reply{});
                 },
                 [&](protocol::ReportFailure& failure) {
                   protocol::RestartDecision decision;
                   const Status status =
                       rendezvous->reportFailure(*this, failure.node, decision, message);
                   reply(status, decision);
                 },
                 [&](protocol::RendezvousStatusQuery& query) {
                   reply(Status::kOk, rendezvous->status(query.rdzvId, query.details != 0));
                 },
                 [&](auto&) {},  // the key-value ops never come here
             },
             request);
}

void NativeSession::answerJoin(std::uint32_t requestId, Status status,
                               const protocol::Assignment& assignment, const std::string& message) {
  if (transport_.closed()) return;
  if (pendingJoins_ > 0) --pendingJoins_;
  transport_.touch();
  if (status == Status::kOk) {
    protocol::encodeReply(transport_.output(), requestId, assignment);
  } else {
    sendError(requestId, status, message);
  }
  transport_.flush();
}

void NativeSession::answerClosed(std::uint32_t requestId, const protocol::JobFailure& failure) {
  if (transport_.closed()) return;
  if (pendingJoins_ > 0) --pendingJoins_;
  protocol::encodeClosed(transport_.output(), requestId, "the rendezvous is closed: the job failed",
                         failure);
  transport_.flush();
}

void NativeSession::pushEvent(const protocol::Event& event) {
  if (transport_.closed()) return;
  protocol::encodeEvent(transport_.output(), event);
  transport_.flush();
}

void NativeSession::startWait(std::uint32_t id, Op op, std::vector<std::string> keys,
                              std::uint32_t timeoutMs) {
  if (waits_.contains(id)) {
    sendError(id, Status::kBadRequest,
              fmt::format("request id {} already has a pending wait on this connection", id));
    return;
  }
  if (timeoutMs == protocol::kNoWait) {
    // Answered now: TCPStore's GET and MULTI_GET (a missing key reads as
    // empty); a WAIT or SHARED_WAIT's TIMEOUT if a key is missing.
    if (op == Op::kWait || op == Op::kSharedWait) {
      if (!context_.state.check(keys)) {
        sendTimeout(id, op, keys);
        return;
      }
    }
    answerReady(id, op, keys);
    return;
  }
  PendingWait wait;
  wait.op = op;
  wait.keys = std::move(keys);
  if (!chargeWait(id, wait)) return;
  std::optional<StoreState::WaiterId> waiter;
  if (context_.state.addWaiter(
          wait.keys, [this, id] { completeWait(id); }, waiter) != StoreResult::kOk) {
    waitBytes_ -= wait.bytes;
    sendStoreError(id, op, StoreResult::kFull);
    return;
  }
  parkWait(id, std::move(wait), waiter, timeoutMs);
}

void NativeSession::startBarrier(std::uint32_t id, protocol::Barrier& barrier) {
  if (waits_.contains(id)) {
    sendError(id, Status::kBadRequest,
              fmt::format("request id {} already has a pending wait on this connection", id));
    return;
  }
  PendingWait wait;
  wait.op = Op::kBarrier;
  wait.keys = {barrier.key};
  if (!chargeWait(id, wait)) return;
  std::optional<StoreState::WaiterId> waiter;
  const StoreResult result = context_.state.barrier(
      barrier.key, barrier.worldSize, [this, id] { completeWait(id); }, waiter);
  if (result != StoreResult::kOk) {
    waitBytes_ -= wait.bytes;
    if (result == StoreResult::kNotInteger) {
      sendError(id, Status::kNotInteger,
                fmt::format("BARRIER on key '{}' failed: its value is not a decimal integer",
                            printable(barrier.key)));
      return;
    }
    sendStoreError(id, Op::kBarrier, result);
    return;
  }
  parkWait(id, std::move(wait), waiter, barrier.timeoutMs);
}

bool NativeSession::chargeWait(std::uint32_t id, PendingWait& wait) {
  wait.bytes = kPendingWaitBytes;
  for (const auto& key : wait.keys) wait.bytes += key.size() + kPendingKeyBytes;
  if (!transport_.reserve(wait.bytes)) {
    sendError(id, Status::kStoreFull,
              fmt::format("{} refused: the server's buffer budget of {} bytes is spent",
                          protocol::opName(wait.op), context_.options.maxBufferedBytes));
    return false;
  }
  waitBytes_ += wait.bytes;
  return true;
}

void NativeSession::parkWait(std::uint32_t id, PendingWait wait,
                             std::optional<StoreState::WaiterId> waiter, std::uint32_t timeoutMs) {
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
      timeoutMs == protocol::kNoTimeout
          ? maxWait
          : std::min<std::chrono::milliseconds>(maxWait, std::chrono::milliseconds(timeoutMs));
  wait.timer = std::make_unique<asio::steady_timer>(transport_.executor(), timeout);
  wait.timer->async_wait(
      [self = transport_.shared_from_this(), this, id](boost::system::error_code ec) {
        if (!ec && !self->closed()) timeoutWait(id);
      });
  waits_.emplace(id, std::move(wait));
}

void NativeSession::completeWait(std::uint32_t id) {
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
  transport_.touch();
  answerReady(id, wait.op, wait.keys);
  transport_.flush();
}

void NativeSession::answerReady(std::uint32_t id, Op op, const std::vector<std::string>& keys) {
  const StoreState& state = context_.state;
  switch (op) {
    case Op::kWait:
    case Op::kBarrier:
      protocol::encodeReply(transport_.output(), id, protocol::EmptyReply{});
      return;
    case Op::kSharedWait: {
      const bool allKeys = std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
        return state.find(key) != nullptr;
      });
      protocol::encodeReply(transport_.output(), id, protocol::FlagReply{allKeys});
      return;
    }
    default:
      break;
  }
  // Sized before it is built: a reply over the frame limit or the server's
  // budget (say, one large key named a thousand times) is an error, never
  // gigabytes of memory.
  std::size_t bytes = protocol::kHeaderSize + 4;
  for (const auto& key : keys) {
    const std::string* value = state.find(key);
    bytes += 4 + (value ? value->size() : 0);
  }
  if (!transport_.reserveReply(bytes)) {
    sendError(id, Status::kTooLarge,
              fmt::format("the {} reply would be {} bytes, over the frame limit of {} bytes or "
                          "what the server can buffer now; ask for fewer keys at a time",
                          protocol::opName(op), bytes, context_.options.limits.maxFrameBytes));
    return;
  }
  auto valueOf = [&](const std::string& key) {
    const std::string* value = state.find(key);
    return value ? *value : std::string();
  };
  if (op == Op::kGet) {
    answer<protocol::Get>(id, StoreResult::kOk, {valueOf(keys.at(0))});
  } else {
    protocol::ValuesReply reply;
    reply.values.reserve(keys.size());
    for (const auto& key : keys) reply.values.push_back(valueOf(key));
    answer<protocol::MultiGet>(id, StoreResult::kOk, reply);
  }
}

bool NativeSession::dropWait(std::uint32_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return false;
  context_.state.removeWaiter(it->second.waiter);
  if (it->second.timer) it->second.timer->cancel();
  waitBytes_ -= it->second.bytes;
  waits_.erase(it);
  context_.syncWaiters();
  return true;
}

void NativeSession::listKeys(std::uint32_t id) {
  protocol::ValuesReply reply;
  reply.values = context_.state.keys();
  if (role_ == Role::kWorker) {
    std::erase_if(reply.values, [&](const std::string& key) {
      return !protocol::keyRefusal(key, false, workerJob_).empty();
    });
  }
  std::size_t bytes = protocol::kHeaderSize + 4;
  for (const auto& key : reply.values) bytes += 4 + key.size();
  if (!transport_.reserveReply(bytes)) {
    sendError(id, Status::kTooLarge,
              fmt::format("the LIST_KEYS reply would be {} bytes, over the frame limit of {} "
                          "bytes or what the server can buffer now",
                          bytes, context_.options.limits.maxFrameBytes));
    return;
  }
  protocol::encodeReply(transport_.output(), id, reply);
}

void NativeSession::timeoutWait(std::uint32_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return;
  const Op op = it->second.op;
  const std::vector<std::string> keys = std::move(it->second.keys);
  dropWait(id);
  sendTimeout(id, op, keys);
  transport_.flush();
}

void NativeSession::sendTimeout(std::uint32_t id, Op op, const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (op == Op::kBarrier || context_.state.find(key) == nullptr) missing.push_back(key);
  }
  sendError(id, Status::kTimeout, protocol::timeoutText(op, missing));
}

template <typename M>
void NativeSession::answer(std::uint32_t id, StoreResult result, const typename M::Reply& reply) {
  if (result == StoreResult::kOk) {
    protocol::encodeReply(transport_.output(), id, reply);
  } else {
    sendStoreError(id, M::kOp, result);
  }
}

void NativeSession::sendStoreError(std::uint32_t id, Op op, StoreResult result) {
  switch (result) {
    case StoreResult::kFull:
      sendError(
          id, Status::kStoreFull,
          fmt::format("{} refused: the store would exceed its limit of {} bytes (keys, "
                      "values, a {}-byte overhead per key, and waiters)",
                      protocol::opName(op), context_.options.maxTotalBytes, kKeyOverheadBytes));
      return;
    case StoreResult::kValueTooLarge:
      sendError(id, Status::kTooLarge,
                fmt::format("{} refused: the value would exceed the limit of {} bytes",
                            protocol::opName(op), context_.options.limits.maxValueBytes));
      return;
    case StoreResult::kNotInteger:
      sendError(id, Status::kNotInteger,
                fmt::format("{} failed: the value is not a decimal integer", protocol::opName(op)));
      return;
    case StoreResult::kOk:
      return;
  }
}

void NativeSession::sendError(std::uint32_t id, Status status, std::string_view message) {
  protocol::encodeError(transport_.output(), id, status, message);
}

}  // namespace ddprun::rendezvous
