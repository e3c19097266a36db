#include "ddprun/rendezvous/store.h"

#include <fmt/format.h>

#include "ddprun/common/error.h"

namespace ddprun::rendezvous {

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(prefix_ + key);
  return out;
}

void PrefixStore::set(const std::string& key, std::string_view value) {
  inner_.set(prefixed(key), value);
}
std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_.get(prefixed(key), timeout);
}
std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return inner_.add(prefixed(key), delta);
}
std::string PrefixStore::compareSet(const std::string& key, std::string_view expected,
                                    std::string_view desired) {
  return inner_.compareSet(prefixed(key), expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  return inner_.check(prefixed(keys));
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  inner_.wait(prefixed(keys), timeout);
}
bool PrefixStore::deleteKey(const std::string& key) { return inner_.deleteKey(prefixed(key)); }
std::int64_t PrefixStore::numKeys() { return inner_.numKeys(); }
std::vector<std::string> PrefixStore::multiGet(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  return inner_.multiGet(prefixed(keys), timeout);
}
void PrefixStore::multiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(items.size());
  for (const auto& [key, value] : items) out.emplace_back(prefix_ + key, value);
  inner_.multiSet(out);
}
void PrefixStore::append(const std::string& key, std::string_view value) {
  inner_.append(prefixed(key), value);
}

void barrier(Store& store, const std::string& name, std::int64_t worldSize,
             std::chrono::milliseconds timeout) {
  if (worldSize <= 0) {
    throw ConfigError(
        fmt::format("barrier '{}' needs a positive world size, got {}", name, worldSize));
  }
  // Arrival n belongs to round (n - 1) / worldSize; the last arrival of a
  // round opens it by creating its key, which wakes everyone waiting on it.
  const std::int64_t arrival = store.add(name + "/arrived", 1);
  const std::int64_t round = (arrival - 1) / worldSize;
  const std::string open = fmt::format("{}/open/{}", name, round);
  if (arrival % worldSize == 0) {
    store.set(open, "1");
    return;
  }
  try {
    store.wait({open}, timeout);
  } catch (const TimeoutError&) {
    throw TimeoutError(fmt::format(
        "barrier '{}' timed out after {} ms: only some of the {} participants arrived in round "
        "{}; check that every rank reaches the barrier",
        name, timeout.count(), worldSize, round));
  }
}

}  // namespace ddprun::rendezvous
