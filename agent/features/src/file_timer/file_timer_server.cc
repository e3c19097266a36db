#include "ddprun/agent/features/file_timer/file_timer_server.h"

#include <signal.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"

namespace ddprun::agent {

namespace asio = boost::asio;
using WallClock = std::chrono::system_clock;

FileTimerServer::FileTimerServer(asio::io_context& io, std::filesystem::path path, AcceptFn accept,
                                 ExpiredFn onExpired)
    : accept_(std::move(accept)),
      onExpired_(std::move(onExpired)),
      pipe_(
          io, std::move(path), "the file timer's pipe", "TORCHELASTIC_TIMER_FILE",
          [this](const std::string& line) { handle(line); },
          [this] { ++dropped_["a request longer than PIPE_BUF"]; }),
      alarm_(io) {
  DDPRUN_INFO("The file timer server reads {} (TORCHELASTIC_TIMER_FILE).", pipe_.path().string());
}

FileTimerServer::~FileTimerServer() = default;

void FileTimerServer::clear() {
  timers_.clear();
  alarm_.cancel();
}

void FileTimerServer::handle(const std::string& line) {
  auto drop = [this](const std::string& reason) {
    if (dropped_[reason]++ == 0) {
      DDPRUN_WARN("The file timer server dropped {} (further ones are dropped silently).", reason);
    }
  };
  const auto request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("pid") || !request["pid"].is_number_integer() ||
      !request.contains("scope_id") || !request["scope_id"].is_string() ||
      !request.contains("expiration_time") || !request["expiration_time"].is_number() ||
      (request.contains("signal") && !request["signal"].is_number_integer())) {
    drop("a request that is not FileTimerClient's JSON");
    return;
  }
  const int pid = request["pid"].get<int>();
  const std::string scope = request["scope_id"].get<std::string>();
  const double expiration = request["expiration_time"].get<double>();
  const int signal = request.value("signal", 0);
  if (pid <= 0 || !accept_(pid)) {
    drop("a request from a pid that is not one of this node's workers");
    return;
  }
  if (onRequest_) onRequest_(pid);
  const auto key = std::make_pair(pid, scope);
  if (expiration < 0) {
    timers_.erase(key);  // release
  } else if (!std::isfinite(expiration) || expiration > 9e9 || signal >= NSIG) {
    // 9e9 s (the year 2255) keeps the deadline inside system_clock's range.
    drop("a timer with an impossible deadline or signal");
    return;
  } else if (timers_.size() >= kMaxTimers && !timers_.contains(key)) {
    drop(fmt::format("a timer beyond the limit of {} live timers", kMaxTimers));
    return;
  } else {
    const auto deadline = WallClock::time_point(
        std::chrono::duration_cast<WallClock::duration>(std::chrono::duration<double>(expiration)));
    timers_[key] = Timer{deadline, signal};
  }
  rearm();
}

void FileTimerServer::rearm() {
  alarm_.cancel();
  if (timers_.empty()) return;
  auto earliest = WallClock::time_point::max();
  for (const auto& [key, timer] : timers_) earliest = std::min(earliest, timer.deadline);
  // The deadline is wall-clock; the alarm waits on the steady clock for
  // the distance to it (an early wake-up only re-arms).
  alarm_.expires_after(std::max(earliest - WallClock::now(), WallClock::duration::zero()));
  alarm_.async_wait([this](boost::system::error_code ec) {
    if (!ec) expire();
  });
}

void FileTimerServer::expire() {
  const auto now = WallClock::now();
  // pid -> its expired timer with the earliest deadline and a signal (as
  // PyTorch picks the signal), else its earliest.
  std::map<int, ExpiredTimer> fired;
  for (const auto& [key, timer] : timers_) {
    if (timer.deadline > now) continue;
    auto [it, inserted] = fired.try_emplace(key.first);
    ExpiredTimer& chosen = it->second;
    const bool better =
        inserted || (timer.signal > 0 && chosen.signal <= 0) ||
        ((timer.signal > 0) == (chosen.signal > 0) && timer.deadline < chosen.deadline);
    if (better) chosen = ExpiredTimer{key.first, key.second, timer.signal, timer.deadline, now};
  }
  for (const auto& [pid, timer] : fired) {
    // Still one of the workers (or theirs)? A pid may have been reused.
    if (!accept_(pid)) {
      dropTimersOf(pid);
      continue;
    }
    onExpired_(timer);
    dropTimersOf(pid);  // that process's timers are done with (PyTorch clears them too)
  }
  rearm();
}

void FileTimerServer::dropTimersOf(int pid) {
  timers_.erase(timers_.lower_bound({pid, std::string()}),
                timers_.lower_bound({pid + 1, std::string()}));
}

}  // namespace ddprun::agent
