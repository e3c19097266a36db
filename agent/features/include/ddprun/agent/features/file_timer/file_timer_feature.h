// FileTimerFeature (TORCHELASTIC_ENABLE_FILE_TIMER=1): serves PyTorch's
// FileTimerClient through a FileTimerServer at the path the user gave in
// TORCHELASTIC_TIMER_FILE, else a new one in the run directory (the workers
// get it as TORCHELASTIC_TIMER_FILE, as under torchrun). An expired timer's
// worker gets the timer's signal and the timer is noted as its failure's
// cause; each accepted request is told to the other features
// (TimerRequested: the worker is training). Timers are dropped when an
// attempt starts, when its group is being stopped and when it ends.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <memory>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/features/file_timer/file_timer_server.h"

namespace ddprun::agent {

class FileTimerFeature : public Feature {
 public:
  // Null unless `env` (the workers' inherited environment) enables file
  // timers. Throws ddprun::Error when the pipe cannot be made.
  static std::unique_ptr<FileTimerFeature> fromEnvironment(
      boost::asio::io_context& io, const Environment& env,
      const std::filesystem::path& runDirectory, RunningWorkers& workers, FactSink& facts);

  FileTimerFeature(boost::asio::io_context& io, const std::filesystem::path& path,
                   RunningWorkers& workers, FactSink& facts);

  void contributeEnvironment(Environment& env) override;
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
