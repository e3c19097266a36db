// Connection: one authenticated socket to a store server, carrying
// concurrent calls matched by request id.
//
// Reading follows the leader/follower pattern: the first caller that needs
// a reply becomes the reader and dispatches every reply it receives to the
// waiting caller it belongs to; the others sleep on a condition variable
// until their reply is delivered or the reader role is free. A single caller
// therefore does send + poll + recv and nothing else.
//
// Thread-safety: call() may run on many threads at once.
// Ownership: owns the socket; closed in the destructor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous {

struct StoreClientOptions;

class Connection {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects (retrying with backoff until `deadline`), sends the preamble
  // and HELLO, and checks the reply. Throws on failure (see StoreClient).
  static std::shared_ptr<Connection> open(const StoreClientOptions& options,
                                          Clock::time_point deadline);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Hands an OK reply's body to the caller's decoder (which returns false
  // when the body does not match the op's reply layout).
  using DecodeOk = std::function<bool(std::string_view body)>;

  // Sends `request` and waits for its reply. An OK reply is given to
  // `decodeOk` (on whichever thread reads it, before call() returns) and
  // nullopt is returned; any other reply is returned as an ErrorReply (an
  // OK body that does not decode as kBadRequest). Throws TimeoutError at
  // `deadline`, NetworkError when the connection breaks.
  std::optional<protocol::ErrorReply> call(const protocol::Request& request,
                                           const DecodeOk& decodeOk, Clock::time_point deadline);

  // The next event the server pushed (rendezvous), or nullopt at
  // `deadline`. Throws NetworkError when the connection breaks.
  std::optional<protocol::Event> waitEvent(Clock::time_point deadline);

  // True once the server said goodbye (idle limit) or the socket broke.
  bool broken() const { return broken_.load(); }
  // True when the server closed this connection politely for idleness, so
  // a new connection may transparently replace it.
  bool saidGoodbye() const { return goodbye_.load(); }
  // Shuts the socket down: every blocked call returns with NetworkError.
  void shutdown();
  // Reads any frames the server pushed while the connection sat idle.
  void drainPushes();
  // This end's IP address ("" when the socket cannot say).
  std::string localAddress() const;
  Clock::time_point lastUse() const { return Clock::time_point(Clock::duration(lastUse_.load())); }

 private:
  struct Slot {
    protocol::Op op = protocol::Op::kPing;
    const DecodeOk* decodeOk = nullptr;
    bool done = false;
    std::optional<protocol::ErrorReply> error;
  };

  Connection(int fd, std::string endpoint);
  void sendAll(const std::string& bytes, Clock::time_point deadline);
  // As the reader: reads until done() holds (checked under mutex_), the
  // deadline passes (false) or the connection breaks (false).
  bool readUntil(const std::function<bool()>& done, Clock::time_point deadline);
  // Makes the socket's receive timeout end near `deadline` (reader only).
  void boundReceive(Clock::time_point deadline);
  // Parses every complete frame in input_ and delivers it.
  void dispatchFrames();
  void markBroken(protocol::Status status, std::string reason);
  [[noreturn]] void throwBroken();
  std::uint32_t nextRequestId();

  const int fd_;
  const std::string endpoint_;
  std::mutex sendMutex_;
  std::mutex mutex_;  // guards everything below except input_
  std::condition_variable delivered_;
  std::unordered_map<std::uint32_t, Slot*> pending_;
  std::deque<protocol::Event> events_;
  bool readerActive_ = false;
  protocol::Status brokenStatus_ = protocol::Status::kOk;
  std::string brokenReason_;
  InputBuffer input_;                          // touched only by the current reader
  std::chrono::microseconds receiveBound_{0};  // current SO_RCVTIMEO (reader only)
  std::atomic<bool> broken_{false};
  std::atomic<bool> goodbye_{false};
  std::atomic<std::uint32_t> nextId_{1};
  std::atomic<Clock::rep> lastUse_{0};
};

}  // namespace ddprun::rendezvous
