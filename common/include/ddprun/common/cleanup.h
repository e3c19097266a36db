// Cleanup: runs a callable when it goes out of scope, unless cancelled.
// The "kill and reap the children on every exit path" helper.
//
// Example:
//   Cleanup killAll = [&] { group.killAll(); };
//   ...
//   std::move(killAll).cancel();   // success: keep them
//
// Thread-safety: none; a scope-bound value.
#pragma once

#include <optional>
#include <utility>

namespace ddprun {

template <typename Callback>
class [[nodiscard]] Cleanup {
 public:
  Cleanup(Callback callback) : callback_(std::move(callback)) {}  // NOLINT: implicit by design
  Cleanup(Cleanup&& other) noexcept : callback_(std::move(other.callback_)) {
    other.callback_.reset();
  }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  Cleanup& operator=(Cleanup&&) = delete;
  ~Cleanup() {
    if (callback_) (*callback_)();
  }

  void cancel() && { callback_.reset(); }

 private:
  std::optional<Callback> callback_;
};

}  // namespace ddprun
