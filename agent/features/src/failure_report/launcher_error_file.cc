#include "ddprun/agent/features/failure_report/launcher_error_file.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>

#include "ddprun/common/logging.h"
#include "ddprun/common/text_file.h"

namespace ddprun::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The worker's own file, if it holds torchelastic's JSON.
json workerJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  json parsed = json::parse(text.str(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("message")) return nullptr;
  return parsed;
}

}  // namespace

bool writeLauncherErrorFile(const fs::path& path, const WorkerFailure* rootCause, int exitCode,
                            const std::string& report, const std::string& summary) {
  json content = rootCause ? workerJson(rootCause->errorFile) : json(nullptr);
  if (!content.is_null()) {
    if (content["message"].is_object() && !content["message"].contains("errorCode")) {
      content["message"]["errorCode"] = exitCode;
    }
  } else {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    std::string callstack;
    if (rootCause) {
      for (const auto& line : rootCause->stderrTail) callstack += line + "\n";
    }
    if (callstack.empty()) callstack = report;
    content = {
        {"message",
         {{"message", rootCause ? describeExit(*rootCause) : summary},
          {"errorCode", exitCode},
          {"extraInfo", {{"py_callstack", callstack}, {"timestamp", std::to_string(now)}}}}}};
  }
  const std::string why = replaceFile(path, content.dump() + "\n");
  if (!why.empty()) {
    DDPRUN_WARN("Cannot write the error file {} (TORCHELASTIC_ERROR_FILE): {}.", path.string(),
                why);
    return false;
  }
  return true;
}

}  // namespace ddprun::agent
