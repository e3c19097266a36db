#include "collective_check.h"

#include <fmt/format.h>

#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store.h"

namespace ddprun::worker {

std::string CollectiveCheck::key(std::int64_t sequence, int rank) const {
  return fmt::format("check/{}/{}", sequence, rank);
}

void CollectiveCheck::check(const std::string& description) {
  const std::int64_t sequence = sequence_++;
  store_.set(key(sequence, rank_), description);
  if (sequence >= 2) store_.deleteKey(key(sequence - 2, rank_));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(sequence, r));
  std::vector<std::string> calls;
  try {
    calls = store_.multiGet(keys, timeout_);
  } catch (const TimeoutError&) {
    std::vector<std::string> missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_.check({keys[r]})) missing.push_back(std::to_string(r));
    }
    throw TimeoutError(fmt::format(
        "collective #{} timed out after {} s: rank {} called {}, but rank(s) {} never called a "
        "collective #{} (they failed, are stuck, or call fewer collectives than this rank)",
        sequence, timeout_.count() / 1000.0, rank_, description, fmt::join(missing, ", "),
        sequence));
  }
  for (int r = 0; r < size_; ++r) {
    if (calls[r] != description) {
      throw Error(fmt::format(
          "collective #{} does not match across ranks: rank {} called {}, but rank {} called {}; "
          "every rank must issue the same collectives in the same order with the same shapes and "
          "dtypes",
          sequence, rank_, description, r, calls[r]));
    }
  }
}

}  // namespace ddprun::worker
