// readReplies: how a client of ddprun's store reads what the store sent.
// The store's two native clients use it, each with its own I/O around it:
// the agents' StoreClient (a blocking socket that many threads call through,
// rendezvous/client) and the node relay's Upstream (an Asio loop carrying
// thousands of workers' requests, rendezvous/relay).
//
// It takes the complete frames at the front of `input` one at a time,
// classifies each (ReceivedFrame) and hands it to `onFrame` before consuming
// it:
//   - kReply (request id != 0): its status and, for kOk, the body; for any
//     other status the error's message (an error body that does not decode
//     becomes a kBadRequest reply that says so);
//   - kEvent: an event the store pushed (rendezvous); one that does not
//     decode is skipped;
//   - kGoodbye: the store stops, or closes a connection idle for its limit;
//   - kRefusal: the store refused this client (token, version) or pushed a
//     frame that is not a ddprun reply. After either the connection is over.
// It returns when the input holds no complete frame (after making room for
// the next frame's body), or when onFrame returns false (the caller closed
// or replaced the connection; the frame is not consumed); both give
// nullopt. A frame over `maxFrameBytes` breaks the stream: it returns why.
//
// Thread-safety: none; the caller owns `input` while reading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous {

struct ReceivedFrame {
  enum class Kind { kReply, kEvent, kGoodbye, kRefusal };
  Kind kind = Kind::kReply;
  std::uint32_t requestId = 0;
  protocol::Status status = protocol::Status::kOk;
  std::string_view body;       // kReply with kOk: valid during onFrame
  protocol::ErrorReply error;  // kReply not kOk, kGoodbye, kRefusal
  protocol::Event event;       // kEvent
};

// Classifies one complete frame; false: an event that does not decode (skip it).
bool classifyFrame(const protocol::FrameHeader& header, std::string_view body,
                   ReceivedFrame& frame);
// The message of a frame over the limit.
std::string frameTooLarge(std::uint32_t bodySize, std::size_t maxFrameBytes);

template <class OnFrame>
std::optional<std::string> readReplies(InputBuffer& input, std::size_t maxFrameBytes,
                                       OnFrame&& onFrame) {
  for (;;) {
    const std::string_view data = input.readable();
    protocol::FrameHeader header;
    const auto parsed = protocol::parseFrameHeader(data, maxFrameBytes, header);
    if (parsed == protocol::ParseResult::kTooLarge) {
      return frameTooLarge(header.bodySize, maxFrameBytes);
    }
    if (parsed == protocol::ParseResult::kNeedMore) {
      if (data.size() >= protocol::kHeaderSize) {
        std::size_t space = 0;
        input.writable(protocol::kHeaderSize + header.bodySize, space);
      }
      return std::nullopt;
    }
    ReceivedFrame frame;
    if (classifyFrame(header, data.substr(protocol::kHeaderSize, header.bodySize), frame) &&
        !onFrame(frame)) {
      return std::nullopt;
    }
    input.consume(protocol::kHeaderSize + header.bodySize);
  }
}

}  // namespace ddprun::rendezvous
