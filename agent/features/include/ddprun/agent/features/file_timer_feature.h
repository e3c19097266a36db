// FileTimerFeature (TORCHELASTIC_ENABLE_FILE_TIMER=1): serves PyTorch's
// FileTimerClient through a FileTimerServer at the path the user gave in
// TORCHELASTIC_TIMER_FILE, else a new one in the run directory (the workers
// get it as TORCHELASTIC_TIMER_FILE, as under torchrun). An expired timer's
// worker gets the timer's signal and the timer is noted as its failure's
// cause. Timers are dropped when an attempt starts, when its group is being
// stopped and when it ends.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/running_workers.h"
#include "ddprun/agent/features/file_timer_server.h"

namespace ddprun::agent {

class FileTimerFeature : public LifecycleHook {
 public:
  // Null unless `env` (the workers' base environment) enables file timers;
  // else the server, with TORCHELASTIC_TIMER_FILE set in `env`. Throws
  // ddprun::Error when the pipe cannot be made.
  static std::unique_ptr<FileTimerFeature> fromEnvironment(
      boost::asio::io_context& io, std::map<std::string, std::string>& env,
      const std::filesystem::path& runDirectory, RunningWorkers& workers);

  FileTimerFeature(boost::asio::io_context& io, const std::filesystem::path& path,
                   RunningWorkers& workers);

  // Called with the pid of every accepted request.
  void onRequest(std::function<void(int pid)> then) { server_.onRequest(std::move(then)); }

  void attemptStarted(const Attempt&) override { server_.clear(); }
  void attemptStopping(const Attempt&, int) override { server_.clear(); }
  void attemptEnded(const Attempt&, const GroupOutcome&) override { server_.clear(); }
  void exiting(const NodeExit&) override { server_.clear(); }

 private:
  void onExpired(const ExpiredTimer& timer);

  RunningWorkers& workers_;
  FileTimerServer server_;
};

}  // namespace ddprun::agent
