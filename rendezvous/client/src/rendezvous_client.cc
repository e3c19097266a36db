#include "ddprun/rendezvous/rendezvous_client.h"

#include "connection.h"

namespace ddprun::rendezvous {

protocol::Assignment RendezvousClient::join(const protocol::JoinRequest& join,
                                            std::chrono::milliseconds timeout) {
  return store_.call(join, timeout);
}

void RendezvousClient::leave(const protocol::NodeReport& report) {
  store_.call(protocol::Leave{report});
}

protocol::RestartDecision RendezvousClient::reportFailure(const protocol::NodeReport& report) {
  return store_.call(protocol::ReportFailure{report});
}

protocol::RendezvousStatus RendezvousClient::status(const std::string& rdzvId, bool details) {
  return store_.call(protocol::RendezvousStatusQuery{rdzvId, details ? 1u : 0u});
}

std::optional<protocol::Event> RendezvousClient::waitEvent(std::chrono::milliseconds timeout) {
  const auto deadline = timeout.count() >= std::chrono::milliseconds::max().count() / 2
                            ? Connection::Clock::time_point::max()
                            : Connection::Clock::now() + timeout;
  return store_.connection()->waitEvent(deadline);
}

void RendezvousClient::waitUntilAllLeft(const std::string& rdzvId,
                                        std::chrono::milliseconds timeout) {
  store_.wait({protocol::rendezvousFinishedKey(rdzvId)}, timeout);
}

std::vector<std::string> RendezvousClient::nodeCounters(protocol::NodeCounters kind,
                                                        const std::string& rdzvId,
                                                        const std::vector<std::string>& nodeIds) {
  std::vector<std::string> keys;
  keys.reserve(nodeIds.size());
  for (const auto& id : nodeIds) keys.push_back(protocol::nodeCountersKey(kind, rdzvId, id));
  return keys.empty() ? std::vector<std::string>() : store_.valuesNow(keys);
}

}  // namespace ddprun::rendezvous
