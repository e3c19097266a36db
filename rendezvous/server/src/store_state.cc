#include "ddprun/rendezvous/store_state.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace ddprun::rendezvous {

namespace {

std::size_t entryBytes(std::string_view key, std::size_t valueBytes) {
  return key.size() + valueBytes + kKeyOverheadBytes;
}

}  // namespace

StoreState::StoreState(StoreLimits limits) : limits_(limits) {}

bool StoreState::fits(std::size_t added, std::size_t removed) const {
  return totalBytes_ - removed + added <= limits_.maxTotalBytes;
}

void StoreState::put(const std::string& key, std::string value) {
  auto [it, inserted] = data_.try_emplace(key);
  if (inserted) {
    totalBytes_ += entryBytes(key, value.size());
  } else {
    totalBytes_ = totalBytes_ - it->second.size() + value.size();
  }
  it->second = std::move(value);
  if (inserted) keyCreated(key);
}

StoreResult StoreState::set(const std::string& key, std::string value) {
  const std::string* old = find(key);
  if (!fits(entryBytes(key, value.size()), old ? entryBytes(key, old->size()) : 0)) {
    return StoreResult::kFull;
  }
  put(key, std::move(value));
  return StoreResult::kOk;
}

StoreResult StoreState::append(const std::string& key, std::string_view value) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (value.size() > limits_.maxValueBytes) return StoreResult::kValueTooLarge;
    return set(key, std::string(value));
  }
  if (value.size() > limits_.maxValueBytes - std::min(limits_.maxValueBytes, it->second.size())) {
    return StoreResult::kValueTooLarge;
  }
  if (!fits(value.size(), 0)) return StoreResult::kFull;
  it->second.append(value);
  totalBytes_ += value.size();
  return StoreResult::kOk;
}

StoreResult StoreState::add(const std::string& key, std::int64_t delta, std::int64_t& result) {
  std::int64_t current = 0;
  if (const std::string* old = find(key)) {
    const char* begin = old->data();
    const char* end = begin + old->size();
    auto [ptr, ec] = std::from_chars(begin, end, current);
    if (ec != std::errc() || ptr != end || old->empty()) return StoreResult::kNotInteger;
  }
  if ((delta > 0 && current > std::numeric_limits<std::int64_t>::max() - delta) ||
      (delta < 0 && current < std::numeric_limits<std::int64_t>::min() - delta)) {
    return StoreResult::kNotInteger;  // the result would not be a 64-bit integer
  }
  result = current + delta;
  return set(key, std::to_string(result));
}

StoreResult StoreState::compareSet(const std::string& key, std::string_view expected,
                                   std::string desired, std::string& result) {
  const std::string* current = find(key);
  if (current == nullptr) {
    // Missing key: set only when the caller expected "missing" (empty).
    if (!expected.empty()) {
      result = std::string(expected);
      return StoreResult::kOk;
    }
  } else if (*current != expected) {
    result = *current;
    return StoreResult::kOk;
  }
  result = desired;
  return set(key, std::move(desired));
}

StoreResult StoreState::multiSet(std::span<const std::string> keys, std::span<std::string> values) {
  // The size check must see the batch as applied: with a repeated key only
  // its last value stays, and an old value is freed once.
  std::unordered_map<std::string_view, std::size_t> last;
  for (std::size_t i = 0; i < keys.size(); ++i) last[keys[i]] = i;
  std::size_t added = 0;
  std::size_t removed = 0;
  for (const auto& [key, index] : last) {
    added += entryBytes(key, values[index].size());
    if (const std::string* old = find(keys[index])) removed += entryBytes(key, old->size());
  }
  // Checked as a whole so the batch is applied entirely or not at all.
  if (!fits(added, removed)) return StoreResult::kFull;
  for (std::size_t i = 0; i < keys.size(); ++i) put(keys[i], std::move(values[i]));
  return StoreResult::kOk;
}

bool StoreState::deleteKey(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  totalBytes_ -= entryBytes(it->first, it->second.size());
  data_.erase(it);
  return true;
}

const std::string* StoreState::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

std::vector<std::string> StoreState::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [key, value] : data_) out.push_back(key);
  return out;
}

bool StoreState::check(std::span<const std::string> keys) const {
  return std::all_of(keys.begin(), keys.end(),
                     [this](const std::string& k) { return data_.contains(k); });
}

StoreResult StoreState::addWaiter(std::span<const std::string> keys, std::function<void()> onReady,
                                  std::optional<WaiterId>& id) {
  id.reset();
  Waiter waiter;
  std::unordered_set<std::string_view> seen;
  waiter.chargedBytes = kWaiterOverheadBytes;
  for (const auto& key : keys) {
    if (!data_.contains(key) && seen.insert(key).second) {
      waiter.keys.push_back(key);
      waiter.chargedBytes += entryBytes(key, 0);
    }
  }
  if (waiter.keys.empty()) return StoreResult::kOk;
  if (!fits(waiter.chargedBytes, 0)) return StoreResult::kFull;
  totalBytes_ += waiter.chargedBytes;
  id = nextWaiterId_++;
  for (const auto& key : waiter.keys) waitersByKey_[key].push_back(*id);
  waiter.missing = waiter.keys.size();
  waiter.onReady = std::move(onReady);
  waiters_.emplace(*id, std::move(waiter));
  return StoreResult::kOk;
}

void StoreState::detach(WaiterId id, const Waiter& waiter, const std::string* except) {
  for (const auto& key : waiter.keys) {
    if (except != nullptr && key == *except) continue;
    auto it = waitersByKey_.find(key);
    if (it == waitersByKey_.end()) continue;
    auto& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) waitersByKey_.erase(it);
  }
}

void StoreState::removeWaiter(WaiterId id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  detach(id, it->second, nullptr);
  totalBytes_ -= it->second.chargedBytes;
  waiters_.erase(it);
}

void StoreState::keyCreated(const std::string& key) {
  auto byKey = waitersByKey_.find(key);
  if (byKey == waitersByKey_.end()) return;
  std::vector<WaiterId> ids = std::move(byKey->second);
  waitersByKey_.erase(byKey);
  std::vector<std::function<void()>> ready;
  for (WaiterId id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end() || --it->second.missing > 0) continue;
    Waiter& waiter = it->second;
    if (!check(waiter.keys)) {
      // A key it saw created was deleted since: count again and keep waiting.
      for (const auto& k : waiter.keys) {
        if (!data_.contains(k)) {
          ++waiter.missing;
          waitersByKey_[k].push_back(id);
        }
      }
      continue;
    }
    detach(id, waiter, &key);
    totalBytes_ -= waiter.chargedBytes;
    ready.push_back(std::move(waiter.onReady));
    waiters_.erase(it);
  }
  // Callbacks run after the bookkeeping so they see a consistent state.
  for (auto& onReady : ready) onReady();
}

}  // namespace ddprun::rendezvous
