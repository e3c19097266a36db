// DialectSession: what a connection does once its first bytes have shown
// the protocol it speaks (NativeSession or TcpStoreSession). The Transport
// owns it, feeds it input and asks it about deadlines.
//
// Thread-safety: the server's loop thread only.
// Ownership: owned by its Transport, which outlives it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace ddprun::rendezvous {

class DialectSession {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~DialectSession() = default;

  // Handles every complete request in the transport's input; false when
  // the connection must stop reading (it is closing or closed).
  virtual bool process() = 0;
  // The connection is closing: drop pending waits, leave rendezvous.
  virtual void closing(const std::string& reason) = 0;
  // Bytes it holds beyond the transport's buffers (charged to the budget).
  virtual std::size_t heldBytes() const = 0;
  // Once proven: when the connection counts as idle or silent too long
  // (Clock::time_point::max() for never), and what to do then.
  virtual Clock::time_point idleDeadline(Clock::time_point lastActivity) const = 0;
  virtual void idleDeadlinePassed() = 0;
  // Whether a rejection may be told with an error frame (native only).
  virtual bool speaksErrorFrames() const = 0;
};

}  // namespace ddprun::rendezvous
