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

std::size_t queuedBytes(const std::string& value) { return value.size() + kQueueItemOverheadBytes; }

}  // namespace

StoreState::StoreState(StoreLimits limits) : limits_(limits) {}

bool StoreState::fits(std::size_t added, std::size_t removed) const {
  return totalBytes_ - removed + added <= limits_.maxTotalBytes;
}

void StoreState::store(const std::string& key, std::string value) {
  auto [it, inserted] = data_.try_emplace(key);
  if (inserted) {
    totalBytes_ += entryBytes(key, value.size());
  } else {
    totalBytes_ = totalBytes_ - it->second.size() + value.size();
  }
  it->second = std::move(value);
}

void StoreState::put(const std::string& key, std::string value) {
  store(key, std::move(value));
  keyWritten(key);
}

bool StoreState::present(const std::string& key) const {
  if (data_.contains(key)) return true;
  auto it = queues_.find(key);
  return it != queues_.end() && !it->second.empty();
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
  keyWritten(key);
  return StoreResult::kOk;
}

StoreResult StoreState::add(const std::string& key, std::int64_t delta, std::int64_t& result) {
  std::int64_t current = 0;
  if (!integerAt(key, current)) return StoreResult::kNotInteger;
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

bool StoreState::integerAt(const std::string& key, std::int64_t& value) const {
  value = 0;
  const std::string* text = find(key);
  if (text == nullptr) return true;  // missing counts as 0
  const char* begin = text->data();
  const char* end = begin + text->size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  return ec == std::errc() && ptr == end && !text->empty();
}

StoreResult StoreState::queuePush(const std::string& key, std::string value) {
  if (value.size() > limits_.maxValueBytes) return StoreResult::kValueTooLarge;
  auto it = queues_.find(key);
  const std::size_t added = queuedBytes(value) + (it == queues_.end() ? entryBytes(key, 0) : 0);
  if (!fits(added, 0)) return StoreResult::kFull;
  if (it == queues_.end()) it = queues_.try_emplace(key).first;
  it->second.push_back(std::move(value));
  totalBytes_ += added;
  queueGrew(key);
  return StoreResult::kOk;
}

std::int64_t StoreState::queuePop(const std::string& key, std::string& value) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return 0;
  const auto before = static_cast<std::int64_t>(it->second.size());
  value = std::move(it->second.front());
  it->second.pop_front();
  totalBytes_ -= queuedBytes(value);
  if (it->second.empty()) {
    totalBytes_ -= entryBytes(key, 0);
    queues_.erase(it);
  }
  return before;
}

std::int64_t StoreState::queueLen(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

std::size_t StoreState::queueFrontBytes(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() || it->second.empty() ? 0 : it->second.front().size();
}

StoreResult StoreState::barrier(const std::string& key, std::int64_t worldSize,
                                std::function<void()> onReady, std::optional<WaiterId>& id) {
  id.reset();
  std::int64_t count = 0;
  if (!integerAt(key, count) || count == std::numeric_limits<std::int64_t>::max()) {
    return StoreResult::kNotInteger;
  }
  ++count;
  std::string value = std::to_string(count);
  const bool complete = count >= worldSize;
  const std::string* old = find(key);
  const std::size_t waiterBytes = complete ? 0 : kWaiterOverheadBytes + entryBytes(key, 0);
  if (!fits(entryBytes(key, value.size()) + waiterBytes, old ? entryBytes(key, old->size()) : 0)) {
    return StoreResult::kFull;
  }
  // An arrival that does not complete the barrier wakes nobody (PyTorch's
  // servers store the count without waking); the one that does wakes all.
  store(key, std::move(value));
  if (complete) {
    keyWritten(key);
  } else {
    id = registerWaiter({key}, waiterBytes, std::move(onReady));
  }
  return StoreResult::kOk;
}

std::vector<std::string> StoreState::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [key, value] : data_) out.push_back(key);
  return out;
}

bool StoreState::check(std::span<const std::string> keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return present(k); });
}

StoreResult StoreState::addWaiter(std::span<const std::string> keys, std::function<void()> onReady,
                                  std::optional<WaiterId>& id) {
  id.reset();
  std::vector<std::string> missing;
  std::unordered_set<std::string_view> seen;
  std::size_t chargedBytes = kWaiterOverheadBytes;
  for (const auto& key : keys) {
    if (!present(key) && seen.insert(key).second) {
      missing.push_back(key);
      chargedBytes += entryBytes(key, 0);
    }
  }
  if (missing.empty()) return StoreResult::kOk;
  if (!fits(chargedBytes, 0)) return StoreResult::kFull;
  id = registerWaiter(std::move(missing), chargedBytes, std::move(onReady));
  return StoreResult::kOk;
}

StoreState::WaiterId StoreState::registerWaiter(std::vector<std::string> keys,
                                                std::size_t chargedBytes,
                                                std::function<void()> onReady) {
  totalBytes_ += chargedBytes;
  const WaiterId id = nextWaiterId_++;
  for (const auto& key : keys) waitersByKey_[key].push_back(id);
  Waiter waiter;
  waiter.missing = keys.size();
  waiter.keys = std::move(keys);
  waiter.onReady = std::move(onReady);
  waiter.chargedBytes = chargedBytes;
  waiters_.emplace(id, std::move(waiter));
  return id;
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

std::function<void()> StoreState::release(WaiterId id, const std::string* except) {
  auto it = waiters_.find(id);
  detach(id, it->second, except);
  totalBytes_ -= it->second.chargedBytes;
  std::function<void()> onReady = std::move(it->second.onReady);
  waiters_.erase(it);
  return onReady;
}

void StoreState::removeWaiter(WaiterId id) {
  if (waiters_.contains(id)) release(id, nullptr);
}

void StoreState::keyWritten(const std::string& key) {
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
      // A key it saw come was deleted (or its queue drained) since: count
      // again and keep waiting.
      for (const auto& k : waiter.keys) {
        if (!present(k)) {
          ++waiter.missing;
          waitersByKey_[k].push_back(id);
        }
      }
      continue;
    }
    ready.push_back(release(id, &key));
  }
  // Callbacks run after the bookkeeping so they see a consistent state.
  for (auto& onReady : ready) onReady();
}

void StoreState::queueGrew(const std::string& key) {
  auto byKey = waitersByKey_.find(key);
  if (byKey == waitersByKey_.end()) return;
  auto& ids = byKey->second;
  std::function<void()> ready;
  for (std::size_t i = 0; i < ids.size() && !ready;) {
    Waiter& waiter = waiters_.at(ids[i]);
    if (waiter.missing > 1) {
      // One of several keys it needs: counted as come, as a created key is.
      --waiter.missing;
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (check(waiter.keys)) {
      const WaiterId id = ids[i];
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(i));
      ready = release(id, &key);
    } else {
      ++i;  // another of its keys went missing again: it waits on
    }
  }
  if (ids.empty()) waitersByKey_.erase(key);
  if (ready) ready();
}

}  // namespace ddprun::rendezvous
