#include "ddprun/agent/rounds/attempt_store.h"

namespace ddprun::agent {

AttemptStore::AttemptStore(rendezvous::StoreServerOptions options) : options_(std::move(options)) {}

AttemptStore::~AttemptStore() = default;

std::uint16_t AttemptStore::fresh() {
  if (server_ && !used_) return server_->port();
  server_.reset();  // stops it and frees a fixed port before it is bound again
  server_ = std::make_unique<rendezvous::StoreServer>(options_);
  server_->start();
  used_ = false;
  return server_->port();
}

std::uint16_t AttemptStore::port() const { return server_ ? server_->port() : 0; }

}  // namespace ddprun::agent
