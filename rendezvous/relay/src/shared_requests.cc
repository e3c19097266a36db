#include "shared_requests.h"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <limits>
#include <utility>

namespace ddprun::rendezvous::relay {

namespace protocol = rendezvous::protocol;

namespace {

constexpr std::uint64_t kWriteWaiting = std::numeric_limits<std::uint64_t>::max();

// A list of keys as one text, each key with its length, so no two lists
// share one (the share keys of WAIT and MULTI_GET).
std::string keyList(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) {
    out += std::to_string(key.size());
    out += ':';
    out += key;
  }
  return out;
}

}  // namespace

bool isWrite(const protocol::Request& request) {
  switch (protocol::opOf(request)) {
    case protocol::Op::kSet:
    case protocol::Op::kAdd:
    case protocol::Op::kCompareSet:
    case protocol::Op::kDeleteKey:
    case protocol::Op::kMultiSet:
    case protocol::Op::kAppend:
    case protocol::Op::kQueuePush:
    case protocol::Op::kQueuePop:
    case protocol::Op::kBarrier:
      return true;
    default:
      return false;
  }
}

SharedRequests::SharedRequests(std::shared_ptr<Upstream> upstream, RelayCounters& counters,
                               std::chrono::microseconds addWindow)
    : upstream_(std::move(upstream)), counters_(counters), addWindow_(addWindow) {}

std::uint32_t SharedRequests::forward(Caller& caller, const protocol::Request& request,
                                      Handler handler) {
  ++counters_.upstreamRequests;
  const std::uint32_t id = upstream_->send(request, std::move(handler));
  if (isWrite(request)) caller.lastWrite = upstream_->sequence();
  sent(caller);
  return id;
}

void SharedRequests::sent(Caller& caller) {
  if (!caller.afterNextRequest) return;
  auto then = std::move(caller.afterNextRequest);
  caller.afterNextRequest = nullptr;
  then();
}

void SharedRequests::gone(Caller& caller) { sent(caller); }

std::shared_ptr<SharedRequests::Group> SharedRequests::joinable(const std::string& shareKey,
                                                                const Caller& caller) {
  auto it = open_.find(shareKey);
  if (it == open_.end() || it->second->sequence <= caller.lastWrite) return nullptr;
  return it->second;
}

std::shared_ptr<SharedRequests::Group> SharedRequests::open(protocol::Request request,
                                                            std::string shareKey, bool isWait,
                                                            std::vector<std::string> keys) {
  auto group = std::make_shared<Group>();
  group->isWait = isWait;
  group->keys = std::move(keys);
  group->shareKey = std::move(shareKey);
  ++counters_.upstreamRequests;
  group->upstreamId =
      upstream_->send(request, [self = shared_from_this(), group](const UpstreamReply& reply) {
        self->answered(group, reply);
      });
  group->sequence = upstream_->sequence();
  if (!group->shareKey.empty()) open_[group->shareKey] = group;
  return group;
}

void SharedRequests::get(Caller& caller, const std::string& key, Handler handler) {
  read(caller, "G" + key, protocol::Get{key, protocol::kNoWait}, std::move(handler));
}

void SharedRequests::multiGet(Caller& caller, const std::vector<std::string>& keys,
                              Handler handler) {
  read(caller, "M" + keyList(keys), protocol::MultiGet{protocol::kNoWait, keys},
       std::move(handler));
}

void SharedRequests::read(Caller& caller, std::string shareKey, protocol::Request request,
                          Handler handler) {
  std::shared_ptr<Group> group = joinable(shareKey, caller);
  if (group) {
    ++counters_.coalesced;
  } else {
    group = open(std::move(request), std::move(shareKey), false, {});
  }
  group->callers.push_back({0, nullptr, std::move(handler)});
  sent(caller);
}

std::uint64_t SharedRequests::wait(Caller& caller, std::vector<std::string> keys, Handler handler) {
  const bool onQueue =
      std::any_of(keys.begin(), keys.end(), [&](const auto& key) { return queues_.contains(key); });
  std::string shareKey = onQueue ? std::string() : "W" + keyList(keys);
  std::shared_ptr<Group> group = onQueue ? nullptr : joinable(shareKey, caller);
  if (group) {
    ++counters_.coalesced;
  } else {
    protocol::SharedWait request{protocol::kNoTimeout, keys};
    group = open(std::move(request), std::move(shareKey), true, std::move(keys));
  }
  const std::uint64_t ticket = nextTicket_++;
  group->callers.push_back({ticket, &caller, std::move(handler)});
  waits_[ticket] = group;
  sent(caller);
  return ticket;
}

void SharedRequests::cancelWait(std::uint64_t ticket) {
  auto it = waits_.find(ticket);
  if (it == waits_.end()) return;
  std::shared_ptr<Group> group = std::move(it->second);
  waits_.erase(it);
  std::erase_if(group->callers, [&](const Waiting& w) { return w.ticket == ticket; });
  if (!group->callers.empty()) return;
  auto shared = open_.find(group->shareKey);
  if (shared != open_.end() && shared->second == group) open_.erase(shared);
  upstream_->cancel(group->upstreamId);
}

void SharedRequests::answered(const std::shared_ptr<Group>& group, const UpstreamReply& reply) {
  auto shared = open_.find(group->shareKey);
  if (shared != open_.end() && shared->second == group) open_.erase(shared);
  if (group->isWait && reply.ok()) {
    protocol::FlagReply everyKeyWritten{true};
    protocol::decodeReply(reply.body, everyKeyWritten);
    if (!everyKeyWritten.value && group->callers.size() > 1) {
      wakeOldest(group, reply);
      return;
    }
  }
  auto callers = std::move(group->callers);
  group->callers.clear();
  if (callers.size() > 1 && reply.ok()) {
    counters_.bytesSaved += (callers.size() - 1) * (protocol::kHeaderSize + reply.body.size());
  }
  for (auto& waiting : callers) {
    if (waiting.ticket != 0) waits_.erase(waiting.ticket);
    waiting.handler(reply);
  }
}

void SharedRequests::wakeOldest(const std::shared_ptr<Group>& group, const UpstreamReply& reply) {
  for (const auto& key : group->keys) queues_.insert(key);
  auto callers = std::move(group->callers);
  group->callers.clear();
  Waiting woken = std::move(callers.front());
  waits_.erase(woken.ticket);
  // The others wait again, each on its own, once the woken caller's next
  // request (its pop) has gone up: on the store they still wait for the
  // next push.
  auto others = std::make_shared<std::vector<Waiting>>(std::make_move_iterator(callers.begin() + 1),
                                                       std::make_move_iterator(callers.end()));
  const std::vector<std::string> keys = group->keys;
  for (const auto& waiting : *others) {
    auto parked = std::make_shared<Group>();
    parked->isWait = true;
    parked->keys = keys;
    parked->callers.push_back({waiting.ticket, waiting.caller, nullptr});
    waits_[waiting.ticket] = parked;  // cancellable while parked
  }
  woken.caller->afterNextRequest = [self = shared_from_this(), others, keys] {
    for (auto& waiting : *others) {
      auto parked = self->waits_.find(waiting.ticket);
      if (parked == self->waits_.end()) continue;  // cancelled meanwhile
      self->waits_.erase(parked);
      auto alone =
          self->open(protocol::SharedWait{protocol::kNoTimeout, keys}, std::string(), true, keys);
      alone->callers.push_back(std::move(waiting));
      self->waits_[alone->callers.back().ticket] = alone;
    }
  };
  woken.handler(reply);
}

void SharedRequests::add(Caller& caller, const std::string& key, std::int64_t delta,
                         AddHandler handler) {
  caller.lastWrite = kWriteWaiting;
  AddQueue& queue = adds_[key];
  queue.waiting.push_back({delta, std::move(handler)});
  if (queue.inFlight == 0 && !queue.gathering) {
    // Only a key's first ADD waits: the node's workers reach a new key
    // (init/, a barrier's count) together; a worker's loop of ADDs on one
    // key never waits.
    if (addWindow_.count() > 0 && addedKeys_.insert(key).second) {
      queue.gathering = true;
      auto timer = std::make_shared<boost::asio::steady_timer>(upstream_->executor(), addWindow_);
      timer->async_wait([self = shared_from_this(), key, timer](boost::system::error_code) {
        self->adds_[key].gathering = false;
        self->releaseAdds(key);
      });
    } else {
      releaseAdds(key);
    }
  }
  sent(caller);
}

void SharedRequests::releaseAdds(const std::string& key) {
  AddQueue& queue = adds_[key];
  if (queue.inFlight > 0 || queue.waiting.empty()) return;
  auto batch = std::move(queue.waiting);
  queue.waiting.clear();
  sendAdds(key, std::move(batch));
}

void SharedRequests::sendAdds(const std::string& key, std::vector<PendingAdd> batch) {
  std::int64_t sum = 0;
  bool fits = true;
  for (const auto& add : batch) fits = fits && !__builtin_add_overflow(sum, add.delta, &sum);
  AddQueue& queue = adds_[key];
  if (batch.size() == 1 || !fits) {
    // One by one: each caller's own ADD, in arrival order.
    for (auto& add : batch) {
      ++queue.inFlight;
      ++counters_.upstreamRequests;
      upstream_->send(protocol::Add{key, add.delta},
                      [self = shared_from_this(), key,
                       handler = std::move(add.handler)](const UpstreamReply& reply) {
                        protocol::IntegerReply value;
                        if (reply.ok()) protocol::decodeReply(reply.body, value);
                        handler(reply, value.value);
                        self->addAnswered(key);
                      });
    }
    return;
  }
  ++queue.inFlight;
  ++counters_.upstreamRequests;
  counters_.addsCombined += batch.size() - 1;
  upstream_->send(protocol::Add{key, sum},
                  [self = shared_from_this(), key, sum,
                   batch = std::move(batch)](const UpstreamReply& reply) mutable {
                    if (!reply.ok() && !reply.lost) {
                      // The store refused the sum: each caller's own ADD gets its own
                      // answer, as without the relay.
                      self->adds_[key].inFlight--;
                      for (auto& add : batch) {
                        std::vector<PendingAdd> one;
                        one.push_back(std::move(add));
                        self->sendAdds(key, std::move(one));
                      }
                      return;
                    }
                    protocol::IntegerReply total;
                    if (reply.ok()) protocol::decodeReply(reply.body, total);
                    std::int64_t running = total.value - sum;
                    for (const auto& add : batch) {
                      running += add.delta;
                      add.handler(reply, running);
                    }
                    self->addAnswered(key);
                  });
}

void SharedRequests::addAnswered(const std::string& key) {
  auto it = adds_.find(key);
  if (it == adds_.end()) return;
  if (--it->second.inFlight > 0) return;
  if (it->second.waiting.empty()) {
    adds_.erase(it);
    return;
  }
  auto batch = std::move(it->second.waiting);
  it->second.waiting.clear();
  sendAdds(key, std::move(batch));
}

}  // namespace ddprun::rendezvous::relay
