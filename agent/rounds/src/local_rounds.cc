#include "ddprun/agent/rounds/local_rounds.h"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

namespace ddprun::agent {

LocalRounds::LocalRounds(boost::asio::io_context& io, AttemptStore& store,
                         rendezvous::protocol::Assignment base, bool agentStoreIsMaster,
                         int maxRestarts, std::string runId)
    : io_(io),
      store_(store),
      base_(std::move(base)),
      agentStoreIsMaster_(agentStoreIsMaster),
      maxRestarts_(maxRestarts),
      runId_(std::move(runId)) {}

void LocalRounds::join(std::function<void(JoinResult)> done) {
  JoinResult result;
  auto assignment = base_;
  assignment.round = restarts_ + 1;
  assignment.restarts = restarts_;
  // Every attempt's workers start on an empty store (the previous
  // attempt's workers have all exited by now).
  const std::uint16_t port = store_.fresh();
  store_.markUsed();
  if (agentStoreIsMaster_) assignment.masterPort = port;
  result.assignment = assignment;
  boost::asio::post(io_, [done = std::move(done), result] { done(result); });
}

void LocalRounds::reportFailure(const FailureNotice& failure,
                                std::function<void(FailureAnswer)> done) {
  FailureAnswer answer;
  answer.decision.emplace();
  answer.decision->restartAllowed = !failure.giveUp && restarts_ < maxRestarts_;
  if (answer.decision->restartAllowed) ++restarts_;
  answer.decision->restarts = restarts_;
  boost::asio::post(io_, [done = std::move(done), answer] { done(answer); });
}

void LocalRounds::leave(std::int64_t, int, std::function<void()> done) {
  boost::asio::post(io_, std::move(done));
}

void LocalRounds::waitUntilAllLeft(std::function<void()> done) {
  boost::asio::post(io_, std::move(done));
}

WorkersStore LocalRounds::workersStore(const rendezvous::protocol::Assignment& round) const {
  return {"127.0.0.1", store_.port(), fmt::format("{}/attempt_{}/", runId_, round.restarts)};
}

std::string LocalRounds::restartMessage(std::int64_t restarts, int maxRestarts) const {
  return fmt::format("Restarting the worker group (restart {} of {}).", restarts, maxRestarts);
}

}  // namespace ddprun::agent
