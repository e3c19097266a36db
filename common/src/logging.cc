#include "ddprun/common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

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

}  // namespace ddprun
