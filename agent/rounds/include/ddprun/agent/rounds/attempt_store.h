// AttemptStore: the store server one attempt's workers use, new for every
// attempt.
//
// PyTorch >= 2.0 clients on the agent's store (TORCHELASTIC_USE_AGENT_STORE)
// use keys without the per-attempt prefix 1.13 added, so a restarted
// attempt would read the previous attempt's keys (Gloo's peer addresses, the
// NCCL unique id) and hang. torchrun 2.6 has exactly that defect: it keeps
// one TCPStore for every restart. Here each attempt (one node) or round
// (several nodes, on the node of group rank 0) gets a server that no
// earlier worker has touched.
//
// Thread-safety: one thread (the agent's loop).
// Ownership: owns the current server; replacing it stops the old one first,
// so a fixed port can be bound again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ddprun/rendezvous/store_server.h"

namespace ddprun::agent {

class AttemptStore {
 public:
  // `options.port` 0: the OS picks a new port for each server.
  explicit AttemptStore(rendezvous::StoreServerOptions options);
  ~AttemptStore();
  AttemptStore(const AttemptStore&) = delete;
  AttemptStore& operator=(const AttemptStore&) = delete;

  // A started server no worker has been given yet: the current one if it
  // was never used, else a new one. Returns its port. Throws NetworkError
  // when the port cannot be bound.
  std::uint16_t fresh();
  // The current server's workers have been (or are being) started.
  void markUsed() { used_ = true; }
  std::uint16_t port() const;
  // Connections the current server accepted (workers' store clients).
  std::uint64_t connectionsAccepted() const { return server_ ? server_->stats().accepted : 0; }

 private:
  rendezvous::StoreServerOptions options_;
  std::unique_ptr<rendezvous::StoreServer> server_;
  bool used_ = false;
};

}  // namespace ddprun::agent
