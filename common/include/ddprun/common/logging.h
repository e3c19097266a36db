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

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun {

// Sets up the process-wide logger for `component` (e.g. "rendezvous"),
// writing to stderr. Safe to call more than once; the last call wins.
void initLogging(std::string_view component);

// Text a client sent, made safe for one log line: control bytes, quotes,
// backslashes and bytes outside printable ASCII become \xNN escapes, and
// anything past `maxBytes` of input is cut with a note of the full size:
//   printable("a\nb") == "a\\x0ab"
std::string printable(std::string_view text, std::size_t maxBytes = 128);

// LogLimiter: lets one kind of event log at most `burst` lines per
// `window`; the lines it holds back are counted and reported with the next
// line it lets through ("... (and 41 more like it)").
//
// Thread-safety: not thread-safe; one owner thread (a server's loop).
class LogLimiter {
 public:
  explicit LogLimiter(int burst = 10,
                      std::chrono::steady_clock::duration window = std::chrono::seconds(10))
      : burst_(burst), window_(window) {}

  // Whether to log this event now; `suppressed` is set to the number held
  // back since the last line that was let through.
  bool allow(std::uint64_t& suppressed);
  // Logs `message` as a warning if allowed now, with the count of the lines
  // held back before it.
  void warn(const std::string& message);

 private:
  int burst_;
  std::chrono::steady_clock::duration window_;
  std::chrono::steady_clock::time_point windowStart_{};
  int inWindow_ = 0;
  std::uint64_t held_ = 0;
};

}  // namespace ddprun

#define DDPRUN_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define DDPRUN_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define DDPRUN_INFO(...) ::spdlog::info(__VA_ARGS__)
#define DDPRUN_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define DDPRUN_ERROR(...) ::spdlog::error(__VA_ARGS__)
