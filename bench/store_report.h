// StoreReport: the results of `ddprun-bench store` as a readable table and
// as JSON.
//
// The table has one row per (client count, driver) with the median ops/s,
// every run, and the ratio of medians against the reference row; without a
// reference (built without LibTorch) the ratio column says so.
//
// Thread-safety: none needed; a value type used by one thread.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "store_benchmark.h"

namespace ddprun::bench {

class StoreReport {
 public:
  StoreReport(StoreBenchOptions options, std::vector<ConfigResult> results,
              bool referenceAvailable);

  void printTable(std::ostream& out) const;
  // Writes the JSON document to `path`; throws ddprun::Error on failure.
  void writeJson(const std::string& path) const;
  // True when every run of every row succeeded.
  bool allSucceeded() const;

 private:
  StoreBenchOptions options_;
  std::vector<ConfigResult> results_;
  bool referenceAvailable_;
};

}  // namespace ddprun::bench
