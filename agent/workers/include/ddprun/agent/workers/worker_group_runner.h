// WorkerGroupRunner: the lifecycle's GroupRunner (one attempt's WorkerGroup
// at a time) and the features' view of the running workers
// (RunningWorkers). It gives each worker its identity: ranks from the
// attempt's assignment, the store its workers use from the round source,
// the job's worker credential and the interface for Gloo's and NCCL's
// sockets.
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the running (or last) attempt's group; borrows the rest.
#pragma once

#include <boost/asio/io_context.hpp>

#include <memory>
#include <set>
#include <string>

#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/round_source.h"
#include "ddprun/agent/core/running_workers.h"
#include "ddprun/agent/workers/worker_group.h"

namespace ddprun::agent {

class WorkerGroupRunner : public GroupRunner, public RunningWorkers {
 public:
  WorkerGroupRunner(boost::asio::io_context& io, WorkerGroup::Shared shared);

  // Where the workers find their store; set before the first start().
  void useRounds(RoundSource& rounds) { rounds_ = &rounds; }
  // What each attempt adds to the workers' environment; set before the
  // first start().
  void useAttemptEnvironment(AttemptEnvironment& env) { attemptEnv_ = &env; }
  // --preload: workers are forked by the zygote instead of exec'd.
  void useForker(const Forker& forker) { shared_.forker = &forker; }
  // What every worker gets as DDPRUN_TOKEN (a credential for the job's keys).
  void setWorkerToken(std::string token) { workerToken_ = std::move(token); }
  // The interface of this node's rendezvous address ("": none chosen).
  void setSocketInterface(std::string name) { socketInterface_ = std::move(name); }

  // GroupRunner.
  void start(const Attempt& next, std::function<void(GroupOutcome)> done) override;
  void stop(int sig, std::chrono::milliseconds grace) override;

  // RunningWorkers.
  std::vector<WatchedWorker> watched() const override;
  std::optional<int> localRankOf(int pid) const override;
  int rankOf(int localRank) const override;
  void noteCause(int localRank, std::string cause, std::vector<std::string> details) override;
  bool signal(int pid, int signal) override;

  // ddprun's terminal changed size: a running group's terminals follow.
  void resizeTerminals();
  // SIGCHLD: without a cgroup the agent is the workers' subreaper and reaps
  // what it adopts (the workers themselves are reaped through their pidfds).
  void reapAdopted();
  // Ends the last group (the node is exiting).
  void reset() { group_.reset(); }

 private:
  WorkerIdentity identityFor(int localRank, const std::string& errorFile) const;

  boost::asio::io_context& io_;
  WorkerGroup::Shared shared_;
  RoundSource* rounds_ = nullptr;
  AttemptEnvironment* attemptEnv_ = nullptr;
  std::string workerToken_;
  std::string socketInterface_;
  Attempt attempt_;
  std::unique_ptr<WorkerGroup> group_;
};

}  // namespace ddprun::agent
