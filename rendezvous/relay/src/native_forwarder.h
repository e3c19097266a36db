// NativeForwarder: a worker's connection in ddprun's native protocol (a C++
// worker of ddprun::worker, with its worker credential) carried to the
// job's store. The preamble and HELLO are answered here: the relay checks
// the credential (or the agents' token) against the token it holds, as the
// store would. Every key-value request is checked as the store checks it
// (protocol::keyRefusal: control keys, the worker's job) and sent up as it
// came under a request id of the relay's; its reply comes back under the
// worker's id, the store's bytes unchanged (errors and their messages
// included). Nothing is shared: a native client's calls are its own. The
// rendezvous operations are refused (an agent joins the store itself). A
// worker that hangs up drops what it still waits for on the store; its
// CANCEL cancels there.
//
// Thread-safety: the relay's loop thread only.
// Ownership: owned by its WorkerConnection; upstream handlers hold the
// connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ddprun/rendezvous/protocol.h"
#include "worker_connection.h"

namespace ddprun::rendezvous::relay {

class NativeForwarder : public Forwarder {
 public:
  explicit NativeForwarder(WorkerConnection& connection);

  bool process() override;
  bool wantsInput() const override;
  void closing() override;

 private:
  void handleFrame(const rendezvous::protocol::FrameHeader& header, std::string_view body);
  void hello(std::uint32_t id, const rendezvous::protocol::Hello& hello);
  void forward(std::uint32_t id, const rendezvous::protocol::Request& request);
  void cancel(std::uint32_t id, std::uint32_t theirs);
  void sendError(std::uint32_t id, rendezvous::protocol::Status status, std::string_view message);
  // A refusal before the handshake completed: an error frame, then close.
  void reject(rendezvous::protocol::Status status, const std::string& message);

  WorkerConnection& connection_;
  RelayContext& context_;
  bool preambleSeen_ = false;
  bool authenticated_ = false;
  bool agent_ = false;
  std::string workerJob_;  // a worker credential's job; empty: an agent
  // The worker's request ids in flight: the relay's id for each, and the
  // bytes it counts against the connection's budget.
  struct Pending {
    std::uint32_t ours = 0;
    std::size_t bytes = 0;
  };
  std::unordered_map<std::uint32_t, Pending> pending_;
  std::size_t inFlightBytes_ = 0;  // sent up, not answered
};

}  // namespace ddprun::rendezvous::relay
