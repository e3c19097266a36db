// LoopClock: the lifecycle's clock on the agent's loop: the steady clock
// and one timer.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>

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

}  // namespace ddprun::agent
