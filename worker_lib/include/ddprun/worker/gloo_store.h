// GlooStore: Gloo's rendezvous store interface over ddprun's store, so a
// gloo::rendezvous::Context bootstraps its connections through the agent's
// store (native protocol, authenticated) under the attempt's key prefix.
//
// Example:
//   ddprun::rendezvous::PrefixStore attempt(client, env.storePrefix);
//   ddprun::worker::GlooStore store(attempt, std::chrono::seconds(30));
//   context->connectFullMesh(store, device);
//
// Thread-safety: as the wrapped store (StoreClient is thread-safe).
// Ownership: borrows the store, which must outlive this object.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>

#include "ddprun/rendezvous/store.h"

namespace ddprun::worker {

class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(rendezvous::Store& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  rendezvous::Store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddprun::worker
