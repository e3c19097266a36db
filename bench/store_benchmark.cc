#include "store_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <mutex>
#include <ostream>
#include <thread>

#include "ddprun/common/error.h"

namespace ddprun::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Stops the driver's server however the run ends.
class ServerGuard {
 public:
  explicit ServerGuard(StoreDriver& driver) : driver_(driver) { driver_.startServer(); }
  ~ServerGuard() { driver_.stopServer(); }
  ServerGuard(const ServerGuard&) = delete;
  ServerGuard& operator=(const ServerGuard&) = delete;

 private:
  StoreDriver& driver_;
};

// The first error any client thread hit.
class FirstError {
 public:
  void record(std::string message) {
    std::lock_guard lock(mutex_);
    if (message_.empty()) message_ = std::move(message);
  }
  std::string take() {
    std::lock_guard lock(mutex_);
    return message_;
  }

 private:
  std::mutex mutex_;
  std::string message_;
};

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double DriverResult::median() const { return bench::median(opsPerSecond); }

const DriverResult* ConfigResult::reference() const {
  for (const auto& row : drivers) {
    if (row.isReference) return &row;
  }
  return nullptr;
}

std::optional<double> ConfigResult::ratio(const DriverResult& row) const {
  const DriverResult* ref = reference();
  if (ref == nullptr || !ref->ok() || !row.ok() || ref->median() <= 0) return std::nullopt;
  return row.median() / ref->median();
}

StoreBenchmark::StoreBenchmark(StoreBenchOptions options,
                               std::vector<std::unique_ptr<StoreDriver>> drivers)
    : options_(std::move(options)), drivers_(std::move(drivers)) {}

std::vector<ConfigResult> StoreBenchmark::run(std::ostream& progress) {
  std::vector<ConfigResult> results;
  for (const int clients : options_.clients) {
    ConfigResult config;
    config.clients = clients;
    for (const auto& driver : drivers_) {
      DriverResult row;
      row.id = driver->id();
      row.description = driver->description();
      row.isReference = driver->isReference();
      config.drivers.push_back(std::move(row));
    }
    for (int round = 0; round < options_.repeat; ++round) {
      // Alternate the order so neither row always runs first.
      for (std::size_t k = 0; k < drivers_.size(); ++k) {
        const std::size_t i = round % 2 == 0 ? k : drivers_.size() - 1 - k;
        DriverResult& row = config.drivers[i];
        const std::string label =
            fmt::format("{} client{}, run {} of {}, {}", clients, clients == 1 ? "" : "s",
                        round + 1, options_.repeat, row.description);
        try {
          const double rate = measure(*drivers_[i], clients);
          row.opsPerSecond.push_back(rate);
          progress << fmt::format("  {}: {:.0f} ops/s\n", label, rate) << std::flush;
        } catch (const std::exception& e) {
          if (row.error.empty()) row.error = e.what();
          progress << fmt::format("  {}: FAILED: {}\n", label, e.what()) << std::flush;
        }
      }
    }
    results.push_back(std::move(config));
  }
  return results;
}

double StoreBenchmark::measure(StoreDriver& driver, int clients) {
  ServerGuard server(driver);
  const auto duration = std::chrono::duration_cast<Clock::duration>(options_.duration);
  const std::string value(options_.valueBytes, 'v');
  Clock::time_point deadline;
  auto startClock = [&]() noexcept { deadline = Clock::now() + duration; };
  std::barrier connected(clients, startClock);
  std::vector<std::uint64_t> ops(static_cast<std::size_t>(clients), 0);
  FirstError error;

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<BenchClient> client;
      try {
        client = driver.connect(i);
      } catch (const std::exception& e) {
        error.record(fmt::format("client {} could not connect: {}", i, e.what()));
        connected.arrive_and_drop();
        return;
      }
      connected.arrive_and_wait();
      const std::string key = fmt::format("bench/{}", i);
      std::uint64_t done = 0;
      try {
        for (;;) {
          client->set(key, value);
          if (Clock::now() >= deadline) break;
          ++done;
          const std::size_t size = client->get(key);
          if (Clock::now() >= deadline) break;
          ++done;
          if (size != value.size()) {
            throw Error(fmt::format("get('{}') returned {} bytes, not the {} that were set", key,
                                    size, value.size()));
          }
        }
      } catch (const std::exception& e) {
        error.record(fmt::format("client {}: {}", i, e.what()));
      }
      ops[static_cast<std::size_t>(i)] = done;
    });
  }
  for (auto& thread : threads) thread.join();
  if (std::string message = error.take(); !message.empty()) throw Error(message);
  std::uint64_t total = 0;
  for (const auto n : ops) total += n;
  return static_cast<double>(total) / options_.duration.count();
}

}  // namespace ddprun::bench
