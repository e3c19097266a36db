#include "ddprun/agent/workers/error_file.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace ddprun::agent {

namespace {

std::int64_t toSeconds(const nlohmann::json& value) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_string()) {
    try {
      return std::stoll(value.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

}  // namespace

std::optional<WorkerError> readErrorFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) return std::nullopt;
  WorkerError error;
  const auto& message = json["message"];
  if (message.is_string()) {
    error.message = message.get<std::string>();
    if (json.contains("timestamp")) error.timestamp = toSeconds(json["timestamp"]);
    return error;
  }
  if (!message.is_object()) return std::nullopt;
  if (message.contains("message") && message["message"].is_string()) {
    error.message = message["message"].get<std::string>();
  }
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const auto& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      error.traceback = extra["py_callstack"].get<std::string>();
    }
    if (extra.contains("timestamp")) error.timestamp = toSeconds(extra["timestamp"]);
  }
  return error;
}

}  // namespace ddprun::agent
