#include "ddprun/agent/features/file_timer/file_timer_feature.h"

#include <fmt/format.h>

#include "ddprun/common/logging.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::agent {

std::unique_ptr<FileTimerFeature> FileTimerFeature::fromEnvironment(
    boost::asio::io_context& io, const Environment& env, const std::filesystem::path& runDirectory,
    RunningWorkers& workers, FactSink& facts) {
  const auto enabled = env.find("TORCHELASTIC_ENABLE_FILE_TIMER");
  if (enabled == env.end() || enabled->second != "1") return nullptr;
  const auto given = env.find("TORCHELASTIC_TIMER_FILE");
  const std::filesystem::path path = given != env.end() && !given->second.empty()
                                         ? std::filesystem::path(given->second)
                                         : runDirectory / "file_timer.pipe";
  return std::make_unique<FileTimerFeature>(io, path, workers, facts);
}

FileTimerFeature::FileTimerFeature(boost::asio::io_context& io, const std::filesystem::path& path,
                                   RunningWorkers& workers, FactSink& facts)
    : workers_(workers),
      server_(
          io, path, [this](int pid) { return workers_.localRankOf(pid).has_value(); },
          [this](const ExpiredTimer& timer) { onExpired(timer); }) {
  server_.onRequest([&facts](int pid) { facts.tell(TimerRequested{pid}); });
}

void FileTimerFeature::contributeEnvironment(Environment& env) {
  env["TORCHELASTIC_TIMER_FILE"] = server_.path().string();
}

void FileTimerFeature::onExpired(const ExpiredTimer& timer) {
  const double late = std::chrono::duration<double>(timer.firedAt - timer.deadline).count();
  const std::optional<int> localRank = workers_.localRankOf(timer.pid);
  const std::string action = timer.signal > 0
                                 ? fmt::format("ddprun sent it {}", signalName(timer.signal))
                                 : std::string("its signal is 0, so it was left running");
  const std::string cause =
      fmt::format("file timer '{}' (pid {}) expired {:.2f} s past its deadline; {}", timer.scope,
                  timer.pid, late, action);
  if (localRank) {
    DDPRUN_WARN("Worker rank {}: {}.", workers_.rankOf(*localRank), cause);
    workers_.noteCause(*localRank, cause);
  } else {
    DDPRUN_WARN("A {}.", cause);
  }
  if (timer.signal > 0) workers_.signal(timer.pid, timer.signal);
}

}  // namespace ddprun::agent
