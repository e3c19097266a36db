#include "ddprun/common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

namespace ddprun {

void initLogging(std::string_view component) {
  // Not registered in spdlog's registry, so repeated calls never clash.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(std::string(component), sink);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n %P] %v");
  logger->set_level(spdlog::level::info);
  if (const char* level = std::getenv("DDPRUN_LOG_LEVEL"); level != nullptr && *level != '\0') {
    logger->set_level(spdlog::level::from_str(level));
  }
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

std::string printable(std::string_view text, std::size_t maxBytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const std::size_t shown = std::min(text.size(), maxBytes);
  out.reserve(shown + 16);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0x0f]);
    }
  }
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

void LogLimiter::warn(const std::string& message) {
  std::uint64_t suppressed = 0;
  if (!allow(suppressed)) return;
  if (suppressed > 0) {
    DDPRUN_WARN("{} ({} more like it were not logged.)", message, suppressed);
  } else {
    DDPRUN_WARN("{}", message);
  }
}

bool LogLimiter::allow(std::uint64_t& suppressed) {
  const auto now = std::chrono::steady_clock::now();
  if (now - windowStart_ >= window_) {
    windowStart_ = now;
    inWindow_ = 0;
  }
  if (inWindow_ >= burst_) {
    ++held_;
    return false;
  }
  ++inWindow_;
  suppressed = held_;
  held_ = 0;
  return true;
}

}  // namespace ddprun
