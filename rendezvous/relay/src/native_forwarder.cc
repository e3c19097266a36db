#include "native_forwarder.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/logging.h"

namespace ddprun::rendezvous::relay {

namespace protocol = rendezvous::protocol;
using protocol::Status;

namespace {
// Before the handshake a frame may not be larger than this (as the store).
constexpr std::size_t kMaxHandshakeFrame = 64 * 1024;
}  // namespace

NativeForwarder::NativeForwarder(WorkerConnection& connection)
    : connection_(connection), context_(connection.context()) {}

bool NativeForwarder::wantsInput() const {
  return inFlightBytes_ <= context_.options.maxUnackedBytes;
}

void NativeForwarder::closing() {
  for (const auto& [theirs, pending] : pending_) context_.shared->upstream().cancel(pending.ours);
  pending_.clear();
}

void NativeForwarder::reject(Status status, const std::string& message) {
  DDPRUN_WARN("The node relay refuses {}: {}.", connection_.peer(), message);
  protocol::encodeError(connection_.output(), 0, status, message);
  connection_.flush();
  connection_.closeAfterFlush(message);
}

void NativeForwarder::sendError(std::uint32_t id, Status status, std::string_view message) {
  protocol::encodeError(connection_.output(), id, status, message);
}

bool NativeForwarder::process() {
  auto& input = connection_.input();
  while (wantsInput() && !connection_.closed()) {
    const std::string_view data = input.readable();
    if (!preambleSeen_) {
      const auto& magic = protocol::kPreamble;
      const std::size_t n = std::min(data.size(), magic.size());
      if (data.substr(0, n) != magic.substr(0, n)) {
        reject(Status::kBadRequest, "it is not a ddprun client (no DDPR preamble)");
        return false;
      }
      if (n < magic.size()) return true;
      input.consume(magic.size());
      preambleSeen_ = true;
      continue;
    }
    protocol::FrameHeader header;
    const std::size_t maxFrame =
        authenticated_ ? context_.options.limits.maxFrameBytes : kMaxHandshakeFrame;
    const auto parsed = protocol::parseFrameHeader(data, maxFrame, header);
    if (parsed == protocol::ParseResult::kNeedMore) {
      if (data.size() >= protocol::kHeaderSize) {
        input.reserveExactly(protocol::kHeaderSize + header.bodySize + 4096);
      }
      return true;
    }
    if (parsed == protocol::ParseResult::kTooLarge) {
      const std::string message = fmt::format("a frame of {} bytes is over the limit of {} bytes",
                                              header.bodySize, maxFrame);
      sendError(header.requestId, Status::kTooLarge, message);
      connection_.flush();
      connection_.closeAfterFlush(message);
      return false;
    }
    handleFrame(header, data.substr(protocol::kHeaderSize, header.bodySize));
    input.consume(protocol::kHeaderSize + header.bodySize);
  }
  return !connection_.closed();
}

void NativeForwarder::handleFrame(const protocol::FrameHeader& header, std::string_view body) {
  protocol::Request request;
  const auto error = protocol::decodeRequest(header.code, body, context_.options.limits, request);
  if (!authenticated_) {
    if (!error.ok()) {
      reject(error.status, error.message);
    } else if (const auto* h = std::get_if<protocol::Hello>(&request)) {
      hello(header.requestId, *h);
    } else {
      reject(Status::kBadRequest,
             fmt::format("it sent {} before HELLO", protocol::opName(protocol::opOf(request))));
    }
    return;
  }
  ++context_.counters.requests;
  if (!error.ok()) {
    sendError(header.requestId, error.status, error.message);  // the framing is intact
    return;
  }
  if (header.requestId == 0) {
    sendError(0, Status::kBadRequest, "request id 0 is reserved for server pushes");
    return;
  }
  std::visit(
      [&](const auto& message) {
        using M = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<M, protocol::Hello>) {
          sendError(header.requestId, Status::kBadRequest,
                    "HELLO was already sent on this connection");
        } else if constexpr (std::is_same_v<M, protocol::JoinRequest> ||
                             std::is_same_v<M, protocol::Leave> ||
                             std::is_same_v<M, protocol::ReportFailure> ||
                             std::is_same_v<M, protocol::RendezvousStatusQuery>) {
          sendError(header.requestId, Status::kAuthFailed,
                    "the node relay carries key-value operations only: an agent joins the "
                    "rendezvous at the job's store itself");
        } else if constexpr (std::is_same_v<M, protocol::Cancel>) {
          cancel(header.requestId, message.requestId);
        } else {
          forward(header.requestId, request);
        }
      },
      request);
}

void NativeForwarder::hello(std::uint32_t id, const protocol::Hello& hello) {
  protocol::HelloVerdict verdict = protocol::judgeHello(hello, context_.options.token);
  if (verdict.status != Status::kOk) {
    reject(verdict.status, verdict.message);
    return;
  }
  agent_ = verdict.agent;
  workerJob_ = std::move(verdict.workerJob);
  authenticated_ = true;
  ++context_.counters.answeredLocally;
  protocol::encodeReply(connection_.output(), id,
                        protocol::HelloReply{hello.version, context_.options.name});
}

void NativeForwarder::forward(std::uint32_t id, const protocol::Request& request) {
  std::string refusal;
  protocol::allStoreKeys(request, [&](std::string_view key) {
    refusal = protocol::keyRefusal(key, agent_, workerJob_);
    return refusal.empty();
  });
  if (!refusal.empty()) {
    sendError(id, Status::kAuthFailed, refusal);
    return;
  }
  if (pending_.contains(id)) {
    sendError(id, Status::kBadRequest,
              fmt::format("request id {} already has a pending request on this connection", id));
    return;
  }
  std::size_t bytes = protocol::kHeaderSize + 64;
  protocol::allStoreKeys(request, [&](std::string_view key) {
    bytes += key.size();
    return true;
  });
  inFlightBytes_ += bytes;
  Caller unused;
  const std::uint32_t ours = context_.shared->forward(
      unused, request,
      [self = connection_.shared_from_this(), this, id, bytes](const UpstreamReply& reply) {
        if (self->closed()) return;
        pending_.erase(id);
        const bool wasFull = !wantsInput();
        inFlightBytes_ -= bytes;
        std::string& out = self->output();
        if (reply.lost) {
          sendError(id, Status::kGoodbye, reply.message);
          self->flush();
          self->closeAfterFlush(reply.message);
          return;
        }
        if (reply.ok()) {
          protocol::appendHeader(out, id, static_cast<std::uint8_t>(Status::kOk),
                                 static_cast<std::uint32_t>(reply.body.size()));
          out.append(reply.body);
        } else {
          sendError(id, reply.status, reply.message);
        }
        self->flush();
        if (wasFull && wantsInput()) self->resume();
      });
  pending_[id] = {ours, bytes};
}

void NativeForwarder::cancel(std::uint32_t id, std::uint32_t theirs) {
  auto it = pending_.find(theirs);
  if (it == pending_.end()) {
    protocol::encodeReply(connection_.output(), id, protocol::FlagReply{false});
    return;
  }
  context_.shared->upstream().cancel(
      it->second.ours, [self = connection_.shared_from_this(), this, id, theirs](bool dropped) {
        if (self->closed()) return;
        if (auto gone = pending_.find(theirs); dropped && gone != pending_.end()) {
          inFlightBytes_ -= gone->second.bytes;
          pending_.erase(gone);
        }
        protocol::encodeReply(self->output(), id, protocol::FlagReply{dropped});
        self->flush();
      });
}

}  // namespace ddprun::rendezvous::relay
