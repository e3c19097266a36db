// The lifecycle's loop-side pieces, beside WorkerGroupRunner (its
// GroupRunner): LoopClock, its clock on the agent's loop (the steady clock
// and one timer), and lifecycleSettingsOf, its settings from the agent's
// configuration (restarts, the back-off seeded at random per node, grace
// periods, the crash-loop stop; the root adds what it connects: the
// failure report, the exit).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <random>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/node_lifecycle.h"

namespace ddprun::agent {

class LoopClock : public LifecycleClock {
 public:
  explicit LoopClock(boost::asio::io_context& io) : timer_(io) {}
  std::chrono::steady_clock::time_point now() const override {
    return std::chrono::steady_clock::now();
  }
  void after(std::chrono::milliseconds wait, std::function<void()> then) override {
    timer_.expires_after(wait);
    timer_.async_wait([then = std::move(then)](boost::system::error_code ec) {
      if (!ec) then();
    });
  }
  void cancel() override { timer_.cancel(); }

 private:
  boost::asio::steady_timer timer_;
};

inline LifecycleSettings lifecycleSettingsOf(const AgentConfig& config) {
  LifecycleSettings s;
  s.maxRestarts = config.restarts.maxRestarts;
  s.workersPerNode = config.nprocPerNode;
  s.shutdownTimeout = config.stopping.shutdownTimeout;
  s.survivorGrace = config.stopping.survivorGrace;
  s.backoff = {config.restarts.backoff.initial, config.restarts.backoff.max};
  s.backoffSeed = std::random_device{}();
  s.maxNoProgressRestarts = config.restarts.maxNoProgressRestarts;
  s.noRestartExitCode = config.restarts.noRestartExitCode;
  return s;
}

}  // namespace ddprun::agent
