// EtcdClient: the few calls of etcd's v3 API that ddprun needs, over its
// JSON gateway (/v3/kv/range, /v3/kv/txn, /v3/lease/..., /v3/watch):
// reads, compare-and-swap on a key's revision, leases for liveness, and a
// watch (a WebSocket on the gateway, so ranges can be added while it runs)
// that resumes where it broke. Requests go to one member and fail over to
// the next when it cannot be reached; a busy cluster (no leader, proposals
// timing out under load) is asked again with a back-off until the request
// timeout. Each client and each watch
// starts at a member chosen at random, so the nodes of a job spread over
// the cluster instead of all loading the first one (docs/architecture.md
// says why the gateway and not generated gRPC stubs).
//
// Example:
//   EtcdClient etcd(options);
//   auto lease = etcd.grantLease(std::chrono::seconds(15));
//   etcd.put("/ddprun/job/alive/n1", "{}", lease);
//   EtcdWatch watch(options, "/ddprun/job/", 0);
//   watch.start();                            // from now on
//   auto range = etcd.getPrefix("/ddprun/job/");  // misses nothing
//   for (;;) for (auto& event : watch.next()) ...
//
// Thread-safety: EtcdClient's calls may run on any thread at once (they
// take turns on one connection). An EtcdWatch is used by one thread;
// its cancel() may be called from any thread.
// Ownership: each owns its connections.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/etcd_options.h"

namespace ddprun::rendezvous {

class HttpConnection;

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t createRevision = 0;
  std::int64_t modRevision = 0;
  std::int64_t lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  std::int64_t revision = 0;  // the store's revision the range was read at
  std::int64_t count = 0;     // keys in the range (all of them, past a limit)
};

// A range read's options (etcd's RangeRequest): `rangeEnd` empty reads
// one key; etcdPrefixEnd(key) reads every key under the prefix `key`.
struct EtcdRangeRequest {
  std::string key;
  std::string rangeEnd;
  std::int64_t limit = 0;              // 0: all
  bool countOnly = false;              // only EtcdRange::count
  bool newestCreatedFirst = false;     // sort by create revision, descending
  std::int64_t maxCreateRevision = 0;  // 0: any
};

// A condition of a transaction: the key's create or mod revision equals
// `revision` (0: the key does not exist).
struct EtcdCompare {
  enum class Target { kCreate, kMod };
  std::string key;
  Target target = Target::kMod;
  std::int64_t revision = 0;
};

// One operation of a transaction.
struct EtcdOp {
  enum class Kind { kPut, kDeleteRange, kRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;       // kPut
  std::int64_t lease = 0;  // kPut; 0: none
  std::string rangeEnd;    // kDeleteRange, kRange: as in EtcdRangeRequest

  static EtcdOp put(std::string key, std::string value, std::int64_t lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), lease, {}};
  }
  static EtcdOp erase(std::string key, std::string rangeEnd = {}) {
    return {Kind::kDeleteRange, std::move(key), {}, 0, std::move(rangeEnd)};
  }
  static EtcdOp read(std::string key, std::string rangeEnd = {}) {
    return {Kind::kRange, std::move(key), {}, 0, std::move(rangeEnd)};
  }
};

// A transaction's outcome: the branch taken, the revision after it, and
// the result of each kRange operation of that branch, in order.
struct EtcdTxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<EtcdRange> ranges;
};

// A compare-and-swap's outcome: on failure, the key as it is now.
struct EtcdSwap {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::optional<EtcdKeyValue> current;
};

// The watch's start revision was compacted away: read again and watch from
// the new revision.
class EtcdCompactedError : public Error {
 public:
  using Error::Error;
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  EtcdRange get(const std::string& key);
  EtcdRange getPrefix(const std::string& prefix);
  EtcdRange range(const EtcdRangeRequest& request);
  // The revision of the write; with `previous`, the key as it was before
  // (nullopt: it did not exist).
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0,
                   std::optional<EtcdKeyValue>* previous = nullptr);
  // If every compare holds, the `success` operations, else `failure`'s, in
  // one atomic step (etcd caps the operations of one transaction, 128 by
  // default).
  EtcdTxnResult txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdOp>& success,
                    const std::vector<EtcdOp>& failure = {});
  // Writes `value` to `key` (attached to `lease`, 0: none) if the key's mod
  // revision is `expected` (0: the key must not exist); with
  // `alsoDeletePrefix`, deletes every key under it in the same transaction
  // (one operation, whatever the number of keys: etcd caps a transaction's
  // operations, 128 by default).
  EtcdSwap compareAndSwap(const std::string& key, std::int64_t expected, const std::string& value,
                          std::int64_t lease = 0, const std::string& alsoDeletePrefix = "");
  // Deletes `key` if its mod revision is still `expected`.
  bool compareAndDelete(const std::string& key, std::int64_t expected);
  void deletePrefix(const std::string& prefix);
  // A lease of `ttl` (etcd may round it up to its minimum); its id.
  std::int64_t grantLease(std::chrono::seconds ttl);
  // Renews the lease; its remaining TTL in seconds, 0 when it expired.
  // TimeoutError when no member answered by `deadline`.
  std::int64_t keepAliveLease(std::int64_t lease,
                              std::optional<std::chrono::steady_clock::time_point> deadline = {});
  // Revokes the lease and deletes its keys; a lease that is gone already
  // (expired, revoked) is not an error.
  void revokeLease(std::int64_t lease);
  // The lease's remaining TTL in seconds; -1 when it expired (or never was).
  std::int64_t leaseTimeToLive(std::int64_t lease);

  // One gateway call with fail-over; the reply's JSON text. Throws
  // NetworkError naming every member when none answers, ServerError when
  // etcd refuses the request, TimeoutError when `deadline` (if given) passes
  // first.
  std::string call(const std::string& target, const std::string& body,
                   std::optional<std::chrono::steady_clock::time_point> deadline = {});
  // Makes calls in progress fail; later calls fail too.
  void shutdown();

  const EtcdOptions& options() const { return options_; }
  // "h1:2379,h2:2379", for messages.
  std::string endpointList() const;
  // This machine's address on its connection to etcd ("" before a call).
  std::string localAddress();
  // Requests sent so far (each try on a member counts).
  std::uint64_t requests() const { return requests_.load(); }

 private:
  EtcdOptions options_;
  std::mutex mutex_;
  std::unique_ptr<HttpConnection> connection_;
  std::size_t current_ = 0;  // index into options_.endpoints
  bool shutdown_ = false;
  std::condition_variable shutdownChanged_;          // ends a busy cluster's back-off
  std::minstd_rand random_{std::random_device{}()};  // the back-off's jitter
  std::atomic<std::uint64_t> requests_{0};
};

struct EtcdWatchEvent {
  bool deleted = false;
  EtcdKeyValue kv;  // deleted: key and modRevision only
};

class EtcdWatch {
 public:
  // Watches every key under `prefix` from `startRevision` on (0: from the
  // moment etcd creates the watcher).
  EtcdWatch(EtcdOptions options, std::string prefix, std::int64_t startRevision);
  // Watches several [key, rangeEnd) ranges (rangeEnd empty: the key alone)
  // on one stream, one connection to etcd whatever their number; events
  // name their keys.
  EtcdWatch(EtcdOptions options, std::vector<std::pair<std::string, std::string>> ranges,
            std::int64_t startRevision);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  // Opens the stream and waits until etcd has created every watcher: a
  // watcher from 0 sees every change after that, so a read made after
  // start() misses nothing between the two. (next() opens the stream
  // itself when start() was not called.) A watcher that starts at a past
  // revision catches up within etcd's 100 ms sync, one from 0 is told of
  // each change at once.
  void start();
  // Watches one more range, on the running stream, from `startRevision`
  // (0: from now). Called by the thread that calls next(), or before
  // next() runs.
  void add(std::string key, std::string rangeEnd, std::int64_t startRevision);
  // Blocks for the next batch of events (one revision's). When a member
  // goes away it resumes on the next one, each range after the last
  // revision it saw. Throws EtcdCompactedError, NetworkError when no member
  // answers within the request timeout each, or Error after cancel().
  std::vector<EtcdWatchEvent> next();
  void cancel();
  // Events delivered so far.
  std::uint64_t events() const { return events_.load(); }

 private:
  struct Range {
    std::string key;
    std::string rangeEnd;
    std::int64_t nextRevision = 0;  // 0: from when etcd creates it
    std::int64_t watchId = -1;      // etcd's, once created on this stream
  };
  void open();
  // The member went away: the next call opens a stream on the next
  // member, each range from the last revision it saw.
  void dropConnection();
  void sendCreate(const Range& range);
  // One message from etcd: the events it carries (none for a creation).
  std::vector<EtcdWatchEvent> handle(const std::string& message);

  EtcdOptions options_;
  std::vector<Range> ranges_;
  std::size_t created_ = 0;              // ranges_[0, created_) have their watch ids
  std::vector<EtcdWatchEvent> pending_;  // arrived while start() waited
  std::size_t current_ = 0;
  std::mutex mutex_;  // guards connection_'s replacement against cancel()
  std::unique_ptr<HttpConnection> connection_;
  bool cancelled_ = false;
  std::atomic<std::uint64_t> events_{0};
};

// A member to start at, chosen at random among `count` (0 when none).
std::size_t randomEndpoint(std::size_t count);

// The etcd range end that selects every key starting with `prefix`.
std::string etcdPrefixEnd(const std::string& prefix);

}  // namespace ddprun::rendezvous
