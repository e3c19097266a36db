// StoreBenchmark: aggregate set+get throughput of each StoreDriver, as
// `ddprun-bench store` reports it.
//
// One run of one driver with N clients, step by step:
//   1. the driver starts a fresh server process;
//   2. N threads each open their own client connection;
//   3. they meet at a barrier, whose completion fixes the start time;
//   4. each thread loops set(key_i, value) then get(key_i) on its own key
//      until start + duration, counting every call that completed before the
//      deadline as one op;
//   5. the threads close their clients and the server is stopped.
// Aggregate ops/s = all ops / duration. Each client count is measured
// `repeat` times; each repetition runs every driver once, alternating which
// goes first, so slow drift on a shared machine hits all rows alike. Rows
// report the median run and the ratio of medians against the reference.
//
// Thread-safety: run() and measure() are called from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store_driver.h"

namespace ddprun::bench {

struct StoreBenchOptions {
  std::vector<int> clients{1, 4, 16, 64};
  std::chrono::duration<double> duration{3.0};  // per run
  int repeat = 3;
  std::size_t valueBytes = 64;
};

// Every run of one driver at one client count.
struct DriverResult {
  std::string id;
  std::string description;
  bool isReference = false;
  std::vector<double> opsPerSecond;  // one entry per successful run, in order
  std::string error;                 // the first failure; empty when none
  bool ok() const { return error.empty() && !opsPerSecond.empty(); }
  double median() const;
};

struct ConfigResult {
  int clients = 0;
  std::vector<DriverResult> drivers;  // in the benchmark's driver order
  const DriverResult* reference() const;
  // median(row) / median(reference); empty without a usable reference.
  std::optional<double> ratio(const DriverResult& row) const;
};

class StoreBenchmark {
 public:
  StoreBenchmark(StoreBenchOptions options, std::vector<std::unique_ptr<StoreDriver>> drivers);
  StoreBenchmark(const StoreBenchmark&) = delete;
  StoreBenchmark& operator=(const StoreBenchmark&) = delete;

  // Measures every client count with every driver; one line per run goes to
  // `progress`. A failing run is recorded in its row, not thrown.
  std::vector<ConfigResult> run(std::ostream& progress);

  // One run (steps 1-5 above); returns aggregate ops/s. Throws on failure.
  double measure(StoreDriver& driver, int clients);

  const StoreBenchOptions& options() const { return options_; }

 private:
  StoreBenchOptions options_;
  std::vector<std::unique_ptr<StoreDriver>> drivers_;
};

double median(std::vector<double> values);

}  // namespace ddprun::bench
