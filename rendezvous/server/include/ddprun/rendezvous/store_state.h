// The store's data: keys, values, queues (PyTorch 2.8+'s queue_push/pop) and
// the waiters blocked on missing keys or on a barrier (2.11+'s BARRIER).
//
// Plain synchronous C++ with no I/O and no locks: the server touches it from
// its one event-loop thread only. A waiter is registered with the keys it
// needs and a callback; the write that makes the last of those keys present
// calls the callback (synchronously, after the waiter has been removed).
// Nothing here polls or sleeps.
//
// Queues follow PyTorch's libuv server (docs/protocol.md "Queues and
// barriers"): a queue lives beside the keys, under its own name; a
// non-empty queue counts as present for check() and waiters; a push wakes
// one waiter (the oldest that it makes ready), where a key's write wakes
// all. A barrier is a decimal count stored at its key: each arrival adds
// one, the arrival that reaches the world size wakes every waiter of that
// key, earlier arrivals wait; as in PyTorch, any write to the key wakes them
// too, and a cancelled arrival still counts.
//
// Everything a client can make it hold counts against one limit
// (StoreLimits::maxTotalBytes): each key's and value's bytes plus a fixed
// overhead per key (the hash node and string headers), each queued value
// with an overhead, and each waiter with its keys. No value grows past
// maxValueBytes, APPEND included.
//
// Thread-safety: not thread-safe; confine an instance to one thread.
// Ownership: callbacks are owned by the state until they fire or are removed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddprun/rendezvous/protocol.h"

namespace ddprun::rendezvous {

struct StoreLimits {
  std::size_t maxTotalBytes = std::size_t{4} << 30;
  std::size_t maxValueBytes = 32 * 1024 * 1024;
};

// What a write or a new waiter came to. The server maps it to the reply of
// the client's dialect.
enum class StoreResult {
  kOk,
  kFull,           // over maxTotalBytes: nothing was changed
  kNotInteger,     // ADD on a value that is not a decimal integer (or overflow)
  kValueTooLarge,  // the value would exceed maxValueBytes (APPEND)
};

// The bytes charged for one key beyond its text (hash node, string headers).
inline constexpr std::size_t kKeyOverheadBytes = 64;
// The bytes charged for one queued value beyond its text.
inline constexpr std::size_t kQueueItemOverheadBytes = 32;
// The bytes charged for one waiter beyond its keys' text.
inline constexpr std::size_t kWaiterOverheadBytes = 128;

class StoreState {
 public:
  using WaiterId = std::uint64_t;

  explicit StoreState(StoreLimits limits = {});
  StoreState(const StoreState&) = delete;
  StoreState& operator=(const StoreState&) = delete;

  // Writes. Each returns kOk, or an error without changing anything. Writes
  // that create a key wake the waiters that needed it.
  StoreResult set(const std::string& key, std::string value);
  StoreResult append(const std::string& key, std::string_view value);
  // Adds `delta` to the decimal integer at `key` (missing counts as 0).
  StoreResult add(const std::string& key, std::int64_t delta, std::int64_t& result);
  // TCPStore semantics: see docs/protocol.md (COMPARE_SET truth table).
  StoreResult compareSet(const std::string& key, std::string_view expected, std::string desired,
                         std::string& result);
  StoreResult multiSet(std::span<const std::string> keys, std::span<std::string> values);
  bool deleteKey(const std::string& key);

  // Queues. A push wakes the oldest waiter that the queue's value makes
  // ready. pop() takes the front value if there is one and returns the
  // queue's length before the pop (0: empty, nothing taken); it never waits.
  StoreResult queuePush(const std::string& key, std::string value);
  std::int64_t queuePop(const std::string& key, std::string& value);
  std::int64_t queueLen(const std::string& key) const;
  // The front value's size, 0 when empty (to size a pop's reply first).
  std::size_t queueFrontBytes(const std::string& key) const;

  // One arrival at the barrier `key` of `worldSize` (PyTorch's BARRIER):
  // adds one to the count at `key`. The arrival that brings it to
  // worldSize or more wakes the key's waiters and leaves `id` empty, as
  // does any arrival past it; an earlier one registers `onReady` and sets
  // `id` (removeWaiter on cancel; its arrival still counts). kNotInteger:
  // the key holds something else; kFull: over maxTotalBytes.
  StoreResult barrier(const std::string& key, std::int64_t worldSize, std::function<void()> onReady,
                      std::optional<WaiterId>& id);

  // Reads. check(): every key exists or is a non-empty queue.
  const std::string* find(const std::string& key) const;
  bool check(std::span<const std::string> keys) const;
  std::int64_t numKeys() const { return static_cast<std::int64_t>(data_.size()); }
  // Everything charged: keys, values, overheads and waiters.
  std::size_t totalBytes() const { return totalBytes_; }
  std::vector<std::string> keys() const;

  // Waiters. Registers `onReady` to run once every key in `keys` is present
  // and sets `id`; leaves `id` empty (and registers nothing) when they all
  // are already. kFull: the waiter would pass maxTotalBytes.
  StoreResult addWaiter(std::span<const std::string> keys, std::function<void()> onReady,
                        std::optional<WaiterId>& id);
  // Drops a waiter that has not fired (timeout, disconnect). No-op if unknown.
  void removeWaiter(WaiterId id);
  std::size_t numWaiters() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::vector<std::string> keys;  // distinct keys it waits for
    std::size_t missing = 0;        // how many of them were missing
    std::function<void()> onReady;
    std::size_t chargedBytes = 0;
  };

  bool fits(std::size_t added, std::size_t removed) const;
  bool present(const std::string& key) const;
  // The decimal integer at `key` (missing: 0); false if it holds another text.
  bool integerAt(const std::string& key, std::int64_t& value) const;
  // Stores key -> value (the accounting only; wakes nobody).
  void store(const std::string& key, std::string value);
  // Stores key -> value and wakes the key's waiters.
  void put(const std::string& key, std::string value);
  // Wakes every waiter of `key` that is now ready (all of them: a write).
  void keyWritten(const std::string& key);
  // Wakes the oldest waiter of `key` that is now ready (a queue push).
  void queueGrew(const std::string& key);
  // Registers a waiter on `keys` (all of them, present or not).
  WaiterId registerWaiter(std::vector<std::string> keys, std::size_t chargedBytes,
                          std::function<void()> onReady);
  void detach(WaiterId id, const Waiter& waiter, const std::string* except);
  // Removes a ready waiter from every list and returns its callback.
  std::function<void()> release(WaiterId id, const std::string* except);

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<WaiterId>> waitersByKey_;
  std::unordered_map<WaiterId, Waiter> waiters_;
  WaiterId nextWaiterId_ = 1;
  std::size_t totalBytes_ = 0;
  StoreLimits limits_;
};

}  // namespace ddprun::rendezvous
