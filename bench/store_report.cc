#include "store_report.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <ostream>

#include "ddprun/common/error.h"

namespace ddprun::bench {

namespace {

std::string formatRuns(const std::vector<double>& runs) {
  std::string out;
  for (const double rate : runs) out += fmt::format("{}{:.0f}", out.empty() ? "" : " ", rate);
  return out;
}

// Kernel, architecture and CPUs: online, and usable by this run (a run under
// `taskset` inherits the affinity into the server processes too).
std::string machineDescription() {
  utsname name{};
  ::uname(&name);
  cpu_set_t usable;
  CPU_ZERO(&usable);
  const int allowed =
      ::sched_getaffinity(0, sizeof(usable), &usable) == 0 ? CPU_COUNT(&usable) : -1;
  return fmt::format("{} {} {}, {} CPUs online, {} usable by this run", name.sysname, name.release,
                     name.machine, ::sysconf(_SC_NPROCESSORS_ONLN), allowed);
}

}  // namespace

StoreReport::StoreReport(StoreBenchOptions options, std::vector<ConfigResult> results,
                         bool referenceAvailable)
    : options_(std::move(options)),
      results_(std::move(results)),
      referenceAvailable_(referenceAvailable) {}

bool StoreReport::allSucceeded() const {
  for (const auto& config : results_) {
    for (const auto& row : config.drivers) {
      if (!row.ok()) return false;
    }
  }
  return true;
}

void StoreReport::printTable(std::ostream& out) const {
  out << fmt::format(
      "\nStore throughput: aggregate set+get calls per second (one op = one set or one get),\n"
      "{}-byte values, {:g} s per run, median of {} interleaved run{}; {}.\n\n",
      options_.valueBytes, options_.duration.count(), options_.repeat,
      options_.repeat == 1 ? "" : "s", machineDescription());

  std::size_t nameWidth = std::string_view("client -> server").size();
  std::size_t runsWidth = std::string_view("runs (ops/s)").size();
  for (const auto& config : results_) {
    for (const auto& row : config.drivers) {
      nameWidth = std::max(nameWidth, row.description.size());
      runsWidth = std::max(runsWidth, formatRuns(row.opsPerSecond).size());
    }
  }
  const auto line = [&](std::string_view clients, std::string_view name, std::string_view median,
                        std::string_view runs, std::string_view ratio) {
    out << fmt::format("{:>7}  {:<{}}  {:>12}  {:<{}}  {}\n", clients, name, nameWidth, median,
                       runs, runsWidth, ratio);
  };
  line("clients", "client -> server", "median ops/s", "runs (ops/s)", "vs reference");
  line("-------", std::string(nameWidth, '-'), "------------", std::string(runsWidth, '-'),
       "------------");
  std::vector<std::string> errors;
  for (const auto& config : results_) {
    for (const auto& row : config.drivers) {
      std::string ratio;
      if (row.isReference) {
        ratio = "(reference)";
      } else if (!referenceAvailable_) {
        ratio = "reference unavailable";
      } else if (auto r = config.ratio(row)) {
        ratio = fmt::format("{:.2f}x", *r);
      } else {
        ratio = "n/a";
      }
      line(std::to_string(config.clients), row.description,
           row.ok() ? fmt::format("{:.0f}", row.median()) : "FAILED", formatRuns(row.opsPerSecond),
           ratio);
      if (!row.error.empty()) {
        errors.push_back(fmt::format("{} with {} client{}: {}", row.description, config.clients,
                                     config.clients == 1 ? "" : "s", row.error));
      }
    }
  }
  if (!referenceAvailable_) {
    out << "\nreference unavailable: this ddprun-bench was built without LibTorch, so "
           "c10d::TCPStore was not measured.\n";
  }
  for (const auto& error : errors) out << "\nerror: " << error << "\n";
}

void StoreReport::writeJson(const std::string& path) const {
  nlohmann::json doc;
  doc["benchmark"] = "store";
  doc["op"] = "one set or one get call; each client loops set(key_i) then get(key_i)";
  doc["seconds_per_run"] = options_.duration.count();
  doc["repeat"] = options_.repeat;
  doc["value_bytes"] = options_.valueBytes;
  doc["machine"] = machineDescription();
  doc["reference_available"] = referenceAvailable_;
  auto& configurations = doc["configurations"] = nlohmann::json::array();
  for (const auto& config : results_) {
    nlohmann::json entry;
    entry["clients"] = config.clients;
    auto& rows = entry["rows"] = nlohmann::json::array();
    for (const auto& row : config.drivers) {
      nlohmann::json item;
      item["id"] = row.id;
      item["description"] = row.description;
      item["reference"] = row.isReference;
      item["runs_ops_per_second"] = row.opsPerSecond;
      item["median_ops_per_second"] = row.ok() ? nlohmann::json(row.median()) : nlohmann::json();
      const auto ratio = config.ratio(row);
      item["ratio_to_reference"] = ratio ? nlohmann::json(*ratio) : nlohmann::json();
      if (!row.error.empty()) item["error"] = row.error;
      rows.push_back(std::move(item));
    }
    configurations.push_back(std::move(entry));
  }
  std::ofstream file(path);
  file << doc.dump(2) << "\n";
  if (!file) throw Error(fmt::format("cannot write the JSON results to '{}'", path));
}

}  // namespace ddprun::bench
