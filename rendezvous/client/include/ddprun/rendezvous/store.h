// Store: the key-value operations every ddprun store client offers, and
// PrefixStore, a decorator that puts a prefix in front of every key (how
// restarted attempts and process groups get key spaces of their own).
//
// Values are byte strings (std::string may hold any bytes). Operations that
// wait take an explicit timeout; the others are bounded by the client's
// request timeout. Failures throw ddprun::Error subclasses (TimeoutError,
// NetworkError, AuthError, ProtocolError, ServerError).
//
// Example:
//   StoreClient client(options);
//   PrefixStore attempt(client, "attempt_0/");
//   attempt.set("rank_0", address);
//   std::string peer = attempt.get("rank_1", std::chrono::seconds(30));
//
// Thread-safety: implementations are safe to call from several threads at
// once (StoreClient multiplexes calls on one connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, std::string_view value) = 0;
  // Blocks until `key` exists (or throws TimeoutError), then returns it.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the decimal integer at `key` (missing = 0).
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Sets `desired` if the value equals `expected` (an empty `expected`
  // matches a missing key); returns the value the key holds afterwards, or
  // `expected` when the key is missing and `expected` is not empty.
  virtual std::string compareSet(const std::string& key, std::string_view expected,
                                 std::string_view desired) = 0;
  // True when every key exists now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists, or throws TimeoutError.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True when the key existed.
  virtual bool deleteKey(const std::string& key) = 0;
  virtual std::int64_t numKeys() = 0;
  // Blocks until every key exists, then returns their values in order.
  virtual std::vector<std::string> multiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) = 0;
  virtual void multiSet(const std::vector<std::pair<std::string, std::string>>& items) = 0;
  // Appends to the value at `key`, creating it when missing.
  virtual void append(const std::string& key, std::string_view value) = 0;
};

// Decorator: every key is prefixed with `prefix` before reaching `inner`.
// numKeys() counts the whole underlying store.
class PrefixStore : public Store {
 public:
  PrefixStore(Store& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {}

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compareSet(const std::string& key, std::string_view expected,
                         std::string_view desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool deleteKey(const std::string& key) override;
  std::int64_t numKeys() override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::pair<std::string, std::string>>& items) override;
  void append(const std::string& key, std::string_view value) override;

 private:
  std::string prefixed(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  Store& inner_;
  std::string prefix_;
};

// A reusable barrier for `worldSize` participants on `store`, named `name`:
// every caller returns once `worldSize` callers have arrived in the current
// round, or throws TimeoutError. Two round trips per caller; no polling.
void barrier(Store& store, const std::string& name, std::int64_t worldSize,
             std::chrono::milliseconds timeout);

}  // namespace ddprun::rendezvous
