#include "group_arrival.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "ddprun/common/error.h"
#include "error_text.h"

namespace ddprun::worker {

namespace {

constexpr const char* kAllArrived = "arrival/all";
constexpr std::size_t kNamedAtMost = 16;

std::string arrivalKey(int rank) { return fmt::format("arrival/{}", rank); }

// The ranks without an arrival key, at most kNamedAtMost of them.
std::vector<int> missingRanks(c10d::Store& store, int size) {
  std::vector<int> missing;
  for (int r = 0; r < size && missing.size() < kNamedAtMost; ++r) {
    if (!store.check({arrivalKey(r)})) missing.push_back(r);
  }
  return missing;
}

}  // namespace

void awaitGroupArrival(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout,
                       const std::string& what) {
  if (size <= 1) return;
  try {
    store.set(arrivalKey(rank), std::vector<uint8_t>{'1'});
    if (store.add("arrival/count", 1) == size) store.set(kAllArrived, std::vector<uint8_t>{'1'});
  } catch (const std::exception& e) {
    throw NetworkError(fmt::format("rank {} of {}: creating {}: its store failed: {}", rank, size,
                                   what, messageOf(e)));
  }
  try {
    store.wait({kAllArrived}, timeout);
    return;
  } catch (const std::exception& e) {
    const std::string message = messageOf(e);
    if (message.find("imeout") == std::string::npos &&
        message.find("imed out") == std::string::npos) {
      throw NetworkError(fmt::format("rank {} of {}: creating {}: its store failed: {}", rank, size,
                                     what, message));
    }
  }
  const auto arrived = store.add("arrival/count", 0);
  const auto missing = missingRanks(store, size);
  throw TimeoutError(fmt::format(
      "rank {} of {}: creating {} timed out after {} ms: {} of {} ranks arrived; rank(s) {}{} "
      "never did (each rank must create the group, with the same world size, within the "
      "timeout: is it running?)",
      rank, size, what, timeout.count(), arrived, size, fmt::join(missing, ", "),
      size - arrived > static_cast<std::int64_t>(missing.size()) ? ", ..." : ""));
}

}  // namespace ddprun::worker
