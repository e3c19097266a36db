// runUntil(): runs an io_context's handlers until a condition holds (a
// callback was called, a pipe's line arrived), for at most `limit`: a test
// of a loop-driven part waits for what it checks, never for a time.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>

namespace ddprun::harness {

// True once `done()` is; false when `limit` passed first.
inline bool runUntil(boost::asio::io_context& io, const std::function<bool()>& done,
                     std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace ddprun::harness
