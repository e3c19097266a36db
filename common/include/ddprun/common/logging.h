// The only logging entry point of ddprun.
//
// Records are one line each: time, level, component, pid, message. The level
// comes from DDPRUN_LOG_LEVEL (trace, debug, info, warn, error, off; default
// info). Messages are sentences that name the object they speak of:
//   DDPRUN_INFO("The store server is listening on {}:{}.", host, port);
//
// Thread-safety: the macros may be called from any thread once
// initLogging() has run (calling them before uses a default logger).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace ddprun {

// Sets up the process-wide logger for `component` (e.g. "rendezvous"),
// writing to stderr. Safe to call more than once; the last call wins.
void initLogging(std::string_view component);

}  // namespace ddprun

#define DDPRUN_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define DDPRUN_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define DDPRUN_INFO(...) ::spdlog::info(__VA_ARGS__)
#define DDPRUN_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define DDPRUN_ERROR(...) ::spdlog::error(__VA_ARGS__)
