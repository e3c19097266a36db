#include "ddprun/rendezvous/reply_reader.h"

#include <fmt/format.h>

namespace ddprun::rendezvous {

using protocol::Status;

bool classifyFrame(const protocol::FrameHeader& header, std::string_view body,
                   ReceivedFrame& frame) {
  frame.requestId = header.requestId;
  frame.status = static_cast<Status>(header.code);
  if (header.requestId != 0) {
    frame.kind = ReceivedFrame::Kind::kReply;
    if (frame.status == Status::kOk) {
      frame.body = body;
    } else if (!protocol::decodeError(header.code, body, frame.error)) {
      frame.status = Status::kBadRequest;
      frame.error = {
          Status::kBadRequest,
          fmt::format("the store's {} reply has a malformed body of {} bytes",
                      protocol::statusName(static_cast<Status>(header.code)), body.size()),
          {}};
    }
    return true;
  }
  if (frame.status == Status::kEvent) {
    frame.kind = ReceivedFrame::Kind::kEvent;
    return protocol::decodeEvent(body, frame.event);
  }
  if (!protocol::decodeError(header.code, body, frame.error)) {
    frame.kind = ReceivedFrame::Kind::kRefusal;
    frame.error = {Status::kBadRequest,
                   fmt::format("the store pushed a frame that is not a ddprun reply (status {}, "
                               "{} bytes)",
                               header.code, body.size()),
                   {}};
    frame.status = Status::kBadRequest;
    return true;
  }
  frame.kind = frame.error.status == Status::kGoodbye ? ReceivedFrame::Kind::kGoodbye
                                                      : ReceivedFrame::Kind::kRefusal;
  frame.status = frame.error.status;
  return true;
}

std::string frameTooLarge(std::uint32_t bodySize, std::size_t maxFrameBytes) {
  return fmt::format("the store sent a frame of {} bytes, over the limit of {}", bodySize,
                     maxFrameBytes);
}

}  // namespace ddprun::rendezvous
