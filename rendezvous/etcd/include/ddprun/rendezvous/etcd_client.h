// EtcdClient: the few calls of etcd's v3 API that ddprun needs, over its
// JSON gateway (/v3/kv/range, /v3/kv/txn, /v3/lease/..., /v3/watch):
// reads, compare-and-swap on a key's revision, leases for liveness, and a
// watch that resumes where it broke. Requests go to one member and fail
// over to the next when it cannot be reached (docs/architecture.md says why
// the gateway and not generated gRPC stubs).
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
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
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

 private:
  void open();

  EtcdOptions options_;
  std::string prefix_;
  std::int64_t nextRevision_;
  std::size_t current_ = 0;
  std::mutex mutex_;  // guards connection_'s replacement against cancel()
  std::unique_ptr<HttpConnection> connection_;
  bool cancelled_ = false;
  std::atomic<std::uint64_t> events_{0};
};

// The etcd range end that selects every key starting with `prefix`.
std::string etcdPrefixEnd(const std::string& prefix);

}  // namespace ddprun::rendezvous
