// SharedRequests: where the relay makes one upstream request out of many
// (NodeRelay's header says what is shared and when). Reads: a GET or WAIT
// joins an identical one in flight if that one went up after the caller's
// last write. ADDs of one key: while one is in flight the next ones wait,
// then go up as one whose sum is split back in arrival order.
//
// Thread-safety: the relay's loop thread only.
// Ownership: shared_ptr (upstream handlers hold it); it keeps each
// caller's handler until its answer or its cancel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ddprun/rendezvous/node_relay.h"
#include "upstream.h"

namespace ddprun::rendezvous::relay {

// One worker connection as the shared requests see it.
struct Caller {
  // The upstream sequence number of its last write (max: one is waiting
  // to go up): a read may share only a request sent after it.
  std::uint64_t lastWrite = 0;
  // What runs once its next request has gone up, or it is gone: a queue
  // push woke it, and the callers it woke before wait again only behind
  // its pop, as they would on the store.
  std::function<void()> afterNextRequest;
};

class SharedRequests : public std::enable_shared_from_this<SharedRequests> {
 public:
  using Handler = Upstream::Handler;
  // An ADD's answer: the sum when `reply.ok()`.
  using AddHandler = std::function<void(const UpstreamReply& reply, std::int64_t sum)>;

  // `addWindow`: how long the first ADD of a key through this relay waits
  // for others to join it (zero: it goes at once; later ADDs join one in
  // flight either way).
  SharedRequests(std::shared_ptr<Upstream> upstream, RelayCounters& counters,
                 std::chrono::microseconds addWindow = {});

  Upstream& upstream() { return *upstream_; }

  // Sends `request` as it is; a write moves the caller's last write.
  std::uint32_t forward(Caller& caller, const rendezvous::protocol::Request& request,
                        Handler handler);
  // TCPStore's GET: the value now (missing: empty); the handler gets a
  // ValueReply body.
  void get(Caller& caller, const std::string& key, Handler handler);
  // TCPStore's MULTI_GET: the values now; the handler gets a ValuesReply
  // body.
  void multiGet(Caller& caller, const std::vector<std::string>& keys, Handler handler);
  // WAIT until every key is present; returns the ticket that cancels it.
  std::uint64_t wait(Caller& caller, std::vector<std::string> keys, Handler handler);
  // The caller no longer waits (its connection closed or it cancelled):
  // its handler is dropped, and the upstream WAIT when nobody else shares it.
  void cancelWait(std::uint64_t ticket);
  // The caller's connection closed.
  void gone(Caller& caller);
  // ADD; the caller's last write is max until the handler runs.
  void add(Caller& caller, const std::string& key, std::int64_t delta, AddHandler handler);

 private:
  struct Waiting {
    std::uint64_t ticket = 0;  // 0: a GET (never cancelled)
    Caller* caller = nullptr;  // a WAIT's; alive while its ticket is
    Handler handler;
  };
  struct Group {
    bool isWait = false;
    std::uint64_t sequence = 0;  // its request's place in the upstream order
    std::uint32_t upstreamId = 0;
    std::string shareKey;  // where it is listed in open_; empty: never shared
    std::vector<std::string> keys;
    std::vector<Waiting> callers;
  };
  struct PendingAdd {
    std::int64_t delta = 0;
    AddHandler handler;
  };
  struct AddQueue {
    int inFlight = 0;        // upstream ADDs of the key not answered yet
    bool gathering = false;  // the first ADD waits out the combining window
    std::vector<PendingAdd> waiting;
  };

  // Sends a new group's request and lists it under `shareKey` (if any).
  std::shared_ptr<Group> open(rendezvous::protocol::Request request, std::string shareKey,
                              bool isWait, std::vector<std::string> keys);
  void answered(const std::shared_ptr<Group>& group, const UpstreamReply& reply);
  // A queue push ended the wait: the oldest caller wakes, the others wait
  // again, each on its own.
  void wakeOldest(const std::shared_ptr<Group>& group, const UpstreamReply& reply);
  std::shared_ptr<Group> joinable(const std::string& shareKey, const Caller& caller);
  // A read shared under `shareKey`, or `request` sent for it.
  void read(Caller& caller, std::string shareKey, rendezvous::protocol::Request request,
            Handler handler);
  void sendAdds(const std::string& key, std::vector<PendingAdd> batch);
  void addAnswered(const std::string& key);
  // A request of `caller` went up.
  static void sent(Caller& caller);

  // The ADDs of `key` waiting and none in flight: go up now.
  void releaseAdds(const std::string& key);

  std::shared_ptr<Upstream> upstream_;
  RelayCounters& counters_;
  std::chrono::microseconds addWindow_;
  std::unordered_map<std::string, std::shared_ptr<Group>> open_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Group>> waits_;  // by ticket
  std::unordered_set<std::string> queues_;                           // names a queue push has woken
  std::unordered_map<std::string, AddQueue> adds_;
  std::unordered_set<std::string> addedKeys_;  // keys ADDed through this relay
  std::uint64_t nextTicket_ = 1;
};

// Whether `request` changes the store (its caller's later reads must not
// share a request sent before it).
bool isWrite(const rendezvous::protocol::Request& request);

}  // namespace ddprun::rendezvous::relay
