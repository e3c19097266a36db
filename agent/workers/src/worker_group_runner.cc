#include "ddprun/agent/workers/worker_group_runner.h"

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "ddprun/common/logging.h"

namespace ddprun::agent {

WorkerGroupRunner::WorkerGroupRunner(boost::asio::io_context& io, WorkerGroup::Shared shared)
    : io_(io), shared_(std::move(shared)) {}

void WorkerGroupRunner::start(const Attempt& next, std::function<void(GroupOutcome)> done) {
  attempt_ = next;
  group_.reset();
  auto env = shared_.baseEnv;
  if (attemptEnv_ != nullptr) attemptEnv_->contributeAttemptEnvironment(attempt_, env);
  group_ = std::make_unique<WorkerGroup>(
      io_, shared_, attempt_.runIndex, attempt_.restartCount, std::move(env),
      [this](int localRank, const std::string& errorFile) {
        return identityFor(localRank, errorFile);
      },
      std::move(done));
  group_->start();
}

void WorkerGroupRunner::stop(int sig, std::chrono::milliseconds grace) {
  if (group_ && !group_->finished()) group_->stop(sig, grace);
}

std::vector<WatchedWorker> WorkerGroupRunner::watched() const {
  return group_ ? group_->watchedWorkers() : std::vector<WatchedWorker>{};
}

std::optional<int> WorkerGroupRunner::localRankOf(int pid) const {
  return group_ ? group_->localRankOf(pid) : std::nullopt;
}

int WorkerGroupRunner::rankOf(int localRank) const {
  return static_cast<int>(attempt_.assignment.rankOffset) + localRank;
}

void WorkerGroupRunner::noteCause(int localRank, std::string cause,
                                  std::vector<std::string> details) {
  if (group_) group_->noteCause(localRank, std::move(cause), std::move(details));
}

bool WorkerGroupRunner::signal(int pid, int signal) {
  if (pid <= 0 || !localRankOf(pid)) return false;
  if (::kill(pid, signal) == 0) return true;
  if (errno != ESRCH) DDPRUN_WARN("Could not signal worker pid {}: {}.", pid, std::strerror(errno));
  return false;
}

void WorkerGroupRunner::reapAdopted() {
  std::set<pid_t> workers;
  for (const auto& w : watched()) workers.insert(w.pid);
  shared_.guard.reapAdopted(workers);
}

void WorkerGroupRunner::resizeTerminals() {
  if (group_ && !group_->finished()) {
    group_->resizeTerminals();
  } else {
    shared_.router.refreshTerminalSize();
  }
}

WorkerIdentity WorkerGroupRunner::identityFor(int localRank, const std::string& errorFile) const {
  const auto& assignment = attempt_.assignment;
  WorkerIdentity id;
  id.localRank = localRank;
  id.rank = rankOf(localRank);
  id.worldSize = static_cast<int>(assignment.worldSize);
  id.groupRank = static_cast<int>(assignment.groupRank);
  id.groupWorldSize = static_cast<int>(assignment.groupWorldSize);
  id.restartCount = attempt_.restartCount;
  id.masterAddr = assignment.masterAddr;
  id.masterPort = static_cast<int>(assignment.masterPort);
  id.useAgentStore = shared_.config.useAgentStore;
  const WorkersStore store = rounds_->workersStore(assignment);
  id.storeHost = store.host;
  id.storePort = store.port;
  id.storePrefix = store.prefix;
  id.token = workerToken_;
  id.errorFile = errorFile;
  id.socketInterface = socketInterface_;
  return id;
}

}  // namespace ddprun::agent
