#include "ddprun/rendezvous/rendezvous_client.h"

#include "connection.h"

namespace ddprun::rendezvous {

using protocol::Op;
using protocol::Request;

protocol::Assignment RendezvousClient::join(const protocol::JoinRequest& join,
                                            std::chrono::milliseconds timeout) {
  Request r;
  r.op = Op::kJoin;
  r.join = join;
  return store_.call(r, timeout).assignment;
}

void RendezvousClient::leave(const protocol::NodeReport& report) {
  Request r;
  r.op = Op::kLeave;
  r.node = report;
  store_.call(r, {});
}

RendezvousClient::FailureDecision RendezvousClient::reportFailure(
    const protocol::NodeReport& report) {
  Request r;
  r.op = Op::kReportFailure;
  r.node = report;
  const protocol::Reply reply = store_.call(r, {});
  return {reply.integer, reply.flag};
}

protocol::RendezvousStatus RendezvousClient::status(const std::string& rdzvId) {
  Request r;
  r.op = Op::kRendezvousStatus;
  r.rdzvId = rdzvId;
  return store_.call(r, {}).rendezvous;
}

std::optional<protocol::Event> RendezvousClient::waitEvent(std::chrono::milliseconds timeout) {
  const auto deadline = timeout.count() >= std::chrono::milliseconds::max().count() / 2
                            ? Connection::Clock::time_point::max()
                            : Connection::Clock::now() + timeout;
  return store_.connection()->waitEvent(deadline);
}

}  // namespace ddprun::rendezvous
