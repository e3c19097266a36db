// EtcdClient: the few calls of etcd's v3 API that ddprun needs, over its
// JSON gateway (/v3/kv/range, /v3/kv/txn, /v3/lease/..., /v3/watch):
// reads, compare-and-swap on a key's revision, leases for liveness, and a
// watch that resumes where it broke. Requests go to one member and fail
// over to the next when it cannot be reached; each client and each watch
// starts at a member chosen at random, so the nodes of a job spread over
// the cluster instead of all loading the first one (docs/architecture.md
// says why the gateway and not generated gRPC stubs).
//
// Example:
//   EtcdClient etcd(options);
//   auto lease = etcd.grantLease(std::chrono::seconds(15));
//   etcd.put("/ddprun/job/alive/n1", "{}", lease);
//   auto range = etcd.getPrefix("/ddprun/job/");
//   EtcdWatch watch(options, "/ddprun/job/", range.revision + 1);
//   for (;;) for (auto& event : watch.next()) ...
//
// Thread-safety: EtcdClient's calls may run on any thread at once (they
// take turns on one connection). An EtcdWatch is used by one thread;
// its cancel() may be called from any thread.
// Ownership: each owns its connections.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
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
  std::string value;                // kPut
  std::int64_t lease = 0;           // kPut; 0: none
  std::string rangeEnd;             // kDeleteRange, kRange: as in EtcdRangeRequest
  std::int64_t limit = 0;           // kRange
  bool newestCreatedFirst = false;  // kRange

  static EtcdOp put(std::string key, std::string value, std::int64_t lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), lease, {}, 0, false};
  }
  static EtcdOp erase(std::string key, std::string rangeEnd = {}) {
    return {Kind::kDeleteRange, std::move(key), {}, 0, std::move(rangeEnd), 0, false};
  }
  static EtcdOp read(std::string key, std::string rangeEnd = {}) {
    return {Kind::kRange, std::move(key), {}, 0, std::move(rangeEnd), 0, false};
  }
  // The `limit` keys under `prefix` created last, newest first.
  static EtcdOp readNewest(const std::string& prefix, std::int64_t limit);
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
  std::int64_t keepAliveLease(std::int64_t lease);
  void revokeLease(std::int64_t lease);
  // The lease's remaining TTL in seconds; -1 when it expired (or never was).
  std::int64_t leaseTimeToLive(std::int64_t lease);

  // One gateway call with fail-over; the reply's JSON text. Throws
  // NetworkError naming every member when none answers, ServerError when
  // etcd refuses the request.
  std::string call(const std::string& target, const std::string& body);
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
  std::atomic<std::uint64_t> requests_{0};
};

struct EtcdWatchEvent {
  bool deleted = false;
  EtcdKeyValue kv;  // deleted: key and modRevision only
};

class EtcdWatch {
 public:
  // Watches every key under `prefix` from `startRevision` on.
  EtcdWatch(EtcdOptions options, std::string prefix, std::int64_t startRevision);
  // Watches the keys in [key, rangeEnd) (rangeEnd empty: `key` alone).
  EtcdWatch(EtcdOptions options, std::string key, std::string rangeEnd, std::int64_t startRevision);
  // Watches several [key, rangeEnd) ranges on one stream (one connection
  // to etcd, whatever their number); events name their keys.
  EtcdWatch(EtcdOptions options, std::vector<std::pair<std::string, std::string>> ranges,
            std::int64_t startRevision);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  // Blocks for the next batch of events (one revision's). When a member
  // goes away it resumes on the next one after the last revision seen.
  // Throws EtcdCompactedError, NetworkError when no member answers within
  // the request timeout each, or Error after cancel().
  std::vector<EtcdWatchEvent> next();
  void cancel();
  // Events delivered so far.
  std::uint64_t events() const { return events_.load(); }
  // The revision a watch that takes over from this one starts at.
  std::int64_t nextRevision() const { return nextRevision_; }

 private:
  void open();

  EtcdOptions options_;
  std::vector<std::pair<std::string, std::string>> ranges_;
  std::int64_t nextRevision_;
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
