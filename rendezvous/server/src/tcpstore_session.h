// TcpStoreSession: a connection speaking PyTorch's TCPStore protocol (the
// 1.13/2.0 dialect, or 2.2+ after VALIDATE), parsed by the resumable
// tcpstore::Decoder. It reaches every key but the control keys; having no
// error reply, it answers a refused write or an oversized reply by closing.
//
// Thread-safety: the server's loop thread only.
// Ownership: owned by its Transport; its wait timer keeps the Transport
// alive.
#pragma once

#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ddprun/rendezvous/store_state.h"
#include "ddprun/rendezvous/tcpstore_codec.h"
#include "dialect_session.h"

namespace ddprun::rendezvous {

class Transport;
struct ServerContext;

class TcpStoreSession : public DialectSession {
 public:
  TcpStoreSession(Transport& transport, tcpstore::Dialect dialect);
  TcpStoreSession(const TcpStoreSession&) = delete;
  TcpStoreSession& operator=(const TcpStoreSession&) = delete;

  bool process() override;
  void closing(const std::string& reason) override;
  std::size_t heldBytes() const override { return decoder_.heldBytes(); }
  // No idle limit: PyTorch clients keep their connection for the job.
  Clock::time_point idleDeadline(Clock::time_point) const override {
    return Clock::time_point::max();
  }
  void idleDeadlinePassed() override {}
  bool speaksErrorFrames() const override { return false; }

 private:
  void handle(tcpstore::Request& request);
  void dropWait();
  // The protocol's only error signal: one (rate-limited) log line, close.
  void closeBecause(const std::string& why);
  void startWaitTimer();
  // What a WAIT or BARRIER that waits sends when its waiter fires: 00.
  std::function<void()> stopWaitingReply();
  // 00 now when there is no waiter; otherwise wait for it (one at most).
  void replyNowOrWait(std::optional<StoreState::WaiterId> waiter);

  Transport& transport_;
  ServerContext& context_;
  tcpstore::Decoder decoder_;
  std::optional<StoreState::WaiterId> wait_;  // a WAIT or BARRIER in progress (one at most)
  std::unique_ptr<boost::asio::steady_timer> waitTimer_;  // ends it at maxWaitTime
};

}  // namespace ddprun::rendezvous
