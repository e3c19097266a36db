#include "ddprun/agent/features/event_log/event_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::agent {

EventLog::EventLog(const EventLogConfig& config) {
  switch (config.kind) {
    case EventLogConfig::Kind::kNull:
      break;
    case EventLogConfig::Kind::kConsole:
      out_ = stderr;
      break;
    case EventLogConfig::Kind::kFile:
      out_ = std::fopen(config.file.c_str(), "ae");
      if (out_ == nullptr) {
        throw Error(fmt::format("--event_log_handler: cannot open {}: {}", config.file.string(),
                                std::strerror(errno)));
      }
      ownsFile_ = true;
      break;
  }
}

EventLog::~EventLog() {
  if (ownsFile_) std::fclose(out_);
}

void EventLog::record(const std::string& name, const std::string& source,
                      const std::map<std::string, std::string>& metadata) {
  if (out_ == nullptr) return;
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [key, value] : metadata) {
    if (auto number = parseInteger(value)) {
      meta[key] = *number;
    } else {
      meta[key] = value;
    }
  }
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const nlohmann::json event = {
      {"name", name}, {"source", source}, {"timestamp", now}, {"metadata", meta}};
  const std::string line = event.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace ddprun::agent
