// NativeSession: a connection speaking ddprun's own protocol
// (docs/protocol.md): the preamble and HELLO (the agents' token, or a
// worker credential), framed requests, blocking waits with their timers,
// and the rendezvous peer role for agents.
//
// Thread-safety: the server's loop thread only.
// Ownership: owned by its Transport; timers keep the Transport alive.
#pragma once

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/store_state.h"
#include "dialect_session.h"
#include "rendezvous_manager.h"

namespace ddprun::rendezvous {

class Transport;
struct ServerContext;

class NativeSession : public DialectSession, public RendezvousManager::Peer {
 public:
  explicit NativeSession(Transport& transport);
  NativeSession(const NativeSession&) = delete;
  NativeSession& operator=(const NativeSession&) = delete;

  // DialectSession
  bool process() override;
  void closing(const std::string& reason) override;
  std::size_t heldBytes() const override { return waitBytes_; }
  Clock::time_point idleDeadline(Clock::time_point lastActivity) const override;
  void idleDeadlinePassed() override;
  bool speaksErrorFrames() const override { return true; }

  // RendezvousManager::Peer
  void pushEvent(const protocol::Event& event) override;
  void answerJoin(std::uint32_t requestId, protocol::Status status,
                  const protocol::Assignment& assignment, const std::string& message) override;
  void answerClosed(std::uint32_t requestId, const protocol::JobFailure& failure) override;
  const std::string& peerAddress() const override;

 private:
  struct PendingWait {
    StoreState::WaiterId waiter = 0;
    protocol::Op op = protocol::Op::kWait;
    std::vector<std::string> keys;
    std::unique_ptr<boost::asio::steady_timer> timer;
    std::size_t bytes = 0;  // charged to the connection while it waits
  };
  // Native clients: the full token (or an open store) makes an agent; a
  // worker credential reaches key-value operations under "<workerJob_>/".
  enum class Role { kAgent, kWorker };

  void handleFrame(const protocol::FrameHeader& header, std::string_view body);
  void handleHello(std::uint32_t id, const protocol::Hello& hello);
  // Whether this client may use every key of `request`; if not, the error
  // reply is sent.
  bool mayUse(std::uint32_t id, const protocol::Request& request);
  // Answers a key-value request, or hands it to startWait/handleRendezvous.
  void handleRequest(std::uint32_t id, protocol::Request& request);
  // JOIN, LEAVE, REPORT_FAILURE and RENDEZVOUS_STATUS (agents only).
  void handleRendezvous(std::uint32_t id, protocol::Request& request);
  // GET, WAIT and MULTI_GET: answered once every key exists.
  void startWait(std::uint32_t id, protocol::Op op, std::vector<std::string> keys,
                 std::uint32_t timeoutMs);
  // BARRIER: one arrival, answered when the count reaches the world size.
  void startBarrier(std::uint32_t id, protocol::Barrier& barrier);
  // Charges a wait's bytes to the connection; false (and the error sent)
  // when the server's budget is spent.
  bool chargeWait(std::uint32_t id, PendingWait& wait);
  // Keeps a charged wait until its waiter fires or its timeout passes
  // (no waiter: it is answered now).
  void parkWait(std::uint32_t id, PendingWait wait, std::optional<StoreState::WaiterId> waiter,
                std::uint32_t timeoutMs);
  void completeWait(std::uint32_t id);
  // The reply of a wait whose keys are ready (GET, MULTI_GET: their values).
  void answerReady(std::uint32_t id, protocol::Op op, const std::vector<std::string>& keys);
  void timeoutWait(std::uint32_t id);
  void sendTimeout(std::uint32_t id, protocol::Op op, const std::vector<std::string>& keys);
  // Drops pending wait `id` (no reply); false when there is none.
  bool dropWait(std::uint32_t id);
  void listKeys(std::uint32_t id);
  // The reply to a request of type M: its OK reply, or the error `result`
  // stands for.
  template <typename M>
  void answer(std::uint32_t id, StoreResult result, const typename M::Reply& reply = {});
  void sendStoreError(std::uint32_t id, protocol::Op op, StoreResult result);
  void sendError(std::uint32_t id, protocol::Status status, std::string_view message);

  Transport& transport_;
  ServerContext& context_;
  bool preambleSeen_ = false;
  bool authenticated_ = false;
  Role role_ = Role::kAgent;
  std::string workerJob_;
  bool member_ = false;  // an agent that joined: its address is a member
  std::unordered_map<std::uint32_t, PendingWait> waits_;
  std::size_t waitBytes_ = 0;  // keys of pending waits, charged
  std::size_t pendingJoins_ = 0;
  // Heartbeat limit of a rendezvous member: silence this long means dead.
  std::chrono::milliseconds keepAlive_{0};
};

}  // namespace ddprun::rendezvous
