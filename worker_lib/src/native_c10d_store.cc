#include "native_c10d_store.h"

#include <c10/util/Exception.h>

#include "ddprun/common/error.h"

namespace ddprun::worker {

namespace {

std::string text(const std::vector<uint8_t>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// c10d waits forever on kNoTimeout (zero); ddprun's client takes a bound.
std::chrono::milliseconds bounded(std::chrono::milliseconds timeout) {
  return timeout == c10d::Store::kNoTimeout ? std::chrono::hours(24 * 365) : timeout;
}

// Runs a call on ddprun's client; its errors become c10::Error, as c10d
// expects of a store (a timeout keeps the word "Timeout" that c10d and its
// users look for).
template <typename F>
auto translated(F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const TimeoutError& e) {
    TORCH_CHECK(false, "Timeout in ddprun's store: ", e.what());
  } catch (const Error& e) {
    TORCH_CHECK(false, "ddprun's store failed: ", e.what());
  }
}

}  // namespace

NativeC10dStore::NativeC10dStore(std::shared_ptr<rendezvous::Store> store,
                                 std::chrono::milliseconds timeout)
    : c10d::Store(timeout), store_(std::move(store)) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
c10::intrusive_ptr<c10d::Store> NativeC10dStore::clone() {
  return c10::make_intrusive<NativeC10dStore>(store_, getTimeout());
}
#endif

void NativeC10dStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  translated([&] { store_->set(key, text(value)); });
}

std::vector<uint8_t> NativeC10dStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  return translated([&] { return bytes(store_->compareSet(key, text(expected), text(desired))); });
}

std::vector<uint8_t> NativeC10dStore::get(const std::string& key) {
  return translated([&] { return bytes(store_->get(key, bounded(timeout_))); });
}

int64_t NativeC10dStore::add(const std::string& key, int64_t value) {
  return translated([&] { return store_->add(key, value); });
}

bool NativeC10dStore::deleteKey(const std::string& key) {
  return translated([&] { return store_->deleteKey(key); });
}

bool NativeC10dStore::check(const std::vector<std::string>& keys) {
  return translated([&] { return store_->check(keys); });
}

int64_t NativeC10dStore::getNumKeys() {
  return translated([&] { return store_->numKeys(); });
}

void NativeC10dStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void NativeC10dStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  translated([&] { store_->wait(keys, bounded(timeout)); });
}

}  // namespace ddprun::worker
