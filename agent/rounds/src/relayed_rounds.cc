#include "ddprun/agent/rounds/relayed_rounds.h"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"

namespace ddprun::agent {

namespace {
// How often a relay's counters are published (ddprun status).
constexpr std::chrono::seconds kPublishEvery{5};
}  // namespace

RelayedRounds::RelayedRounds(boost::asio::io_context& io, std::unique_ptr<RoundSource> inner,
                             std::string token, std::function<void(std::string)> publish)
    : io_(io), inner_(std::move(inner)), token_(std::move(token)), publish_(std::move(publish)) {}

RelayedRounds::~RelayedRounds() = default;

void RelayedRounds::join(std::function<void(JoinResult)> done) {
  relay_.reset();  // the last round's workers are gone
  inner_->join([this, done = std::move(done)](JoinResult result) {
    if (result.assignment) {
      auto& a = *result.assignment;
      innerAssignment_ = a;
      rendezvous::RelayOptions options;
      options.upstreamHost = a.masterAddr;
      options.upstreamPort = static_cast<std::uint16_t>(a.masterPort);
      options.token = token_;
      options.name = fmt::format("relay of group rank {}", a.groupRank);
      options.connectSpread = rendezvous::relayConnectSpread(a.groupWorldSize);
      if (publish_) {
        options.reportEvery = kPublishEvery;
        options.onReport = [publish = publish_](const rendezvous::RelayCounters& counters) {
          publish(countersText(counters));
        };
      }
      const std::string store = fmt::format("{}:{}", a.masterAddr, a.masterPort);
      try {
        const std::uint64_t relay = ++relays_;
        relay_ = std::make_unique<rendezvous::RelayThread>(
            options, [this, store, relay](const std::string& reason) {
              const std::string why =
                  fmt::format("this node's relay lost the workers' store at {}: {}", store, reason);
              DDPRUN_WARN("{}. This node's workers lose their store connection.", why);
              // On the agent's loop; a relay already replaced says nothing.
              boost::asio::post(io_, [this, why, relay] {
                if (relay == relays_ && facts_ != nullptr) facts_->tell(RelayLost{why});
              });
            });
      } catch (const std::exception& e) {
        result.assignment.reset();
        result.error = fmt::format("the node relay could not start: {}", e.what());
        done(std::move(result));
        return;
      }
      DDPRUN_DEBUG("Round {}: the node relay on 127.0.0.1:{} carries the workers' store at {}.",
                   a.round, relay_->port(), store);
      a.masterAddr = "127.0.0.1";
      a.masterPort = relay_->port();
    }
    done(std::move(result));
  });
}

void RelayedRounds::leave(std::int64_t round, int exitCode, std::function<void()> done) {
  relay_.reset();
  inner_->leave(round, exitCode, std::move(done));
}

WorkersStore RelayedRounds::workersStore(const rendezvous::protocol::Assignment& round) const {
  if (round.round != innerAssignment_.round || !relay_) return inner_->workersStore(round);
  // The native workers (ddprun::worker) through the relay too, to the
  // round's store, with their credential and the inner source's prefix.
  WorkersStore store = inner_->workersStore(innerAssignment_);
  store.host = "127.0.0.1";
  store.port = relay_->port();
  return store;
}

rendezvous::RelayCounters RelayedRounds::counters() {
  return relay_ ? relay_->counters() : rendezvous::RelayCounters{};
}

}  // namespace ddprun::agent
