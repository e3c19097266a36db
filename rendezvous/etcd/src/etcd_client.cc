#include "ddprun/rendezvous/etcd_client.h"

#include <openssl/evp.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <random>
#include <utility>

#include "http_connection.h"

namespace ddprun::rendezvous {

using json = nlohmann::json;
using Clock = HttpConnection::Clock;

namespace {

// The gateway carries keys and values as base64 (protobuf bytes).
std::string toBase64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string fromBase64(const std::string& in) {
  if (in.empty()) return {};
  std::string out(3 * in.size() / 4 + 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) throw ProtocolError("etcd sent a key or value that is not base64");
  std::size_t size = static_cast<std::size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes.
  for (std::size_t i = in.size(); i > 0 && in[i - 1] == '='; --i) --size;
  out.resize(size);
  return out;
}

// int64 fields arrive as JSON strings (proto3's JSON mapping), and are
// left out when zero.
std::int64_t int64Of(const json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  if (it->is_number_integer()) return it->get<std::int64_t>();
  return 0;
}

EtcdKeyValue keyValueOf(const json& kv) {
  EtcdKeyValue out;
  out.key = fromBase64(kv.value("key", ""));
  out.value = fromBase64(kv.value("value", ""));
  out.createRevision = int64Of(kv, "create_revision");
  out.modRevision = int64Of(kv, "mod_revision");
  out.lease = int64Of(kv, "lease");
  return out;
}

std::int64_t revisionOf(const json& reply) {
  const auto header = reply.find("header");
  return header == reply.end() ? 0 : int64Of(*header, "revision");
}

json parse(const std::string& text) {
  json reply = json::parse(text, nullptr, false);
  if (!reply.is_object()) throw ProtocolError("etcd sent a reply that is not a JSON object");
  return reply;
}

json rangeRequest(const std::string& key, const std::string& rangeEnd) {
  json request = {{"key", toBase64(key)}};
  if (!rangeEnd.empty()) request["range_end"] = toBase64(rangeEnd);
  return request;
}

EtcdRange rangeOf(const json& reply, std::int64_t revision) {
  EtcdRange range;
  range.revision = revision;
  for (const auto& kv : reply.value("kvs", json::array())) range.kvs.push_back(keyValueOf(kv));
  range.count = int64Of(reply, "count");
  return range;
}

json operationJson(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::kPut: {
      json put = {{"key", toBase64(op.key)}, {"value", toBase64(op.value)}};
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      return {{"request_put", put}};
    }
    case EtcdOp::Kind::kDeleteRange:
      return {{"request_delete_range", rangeRequest(op.key, op.rangeEnd)}};
    case EtcdOp::Kind::kRange:
      return {{"request_range", rangeRequest(op.key, op.rangeEnd)}};
  }
  return {};
}

}  // namespace

std::string etcdPrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xFF) {
      ++end.back();
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::size_t randomEndpoint(std::size_t count) {
  static thread_local std::minstd_rand random(std::random_device{}());
  return count == 0 ? 0 : random() % count;
}

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), current_(randomEndpoint(options_.endpoints.size())) {
  if (options_.endpoints.empty()) throw ConfigError("no etcd endpoint given");
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::endpointList() const {
  std::string list;
  for (const auto& e : options_.endpoints) list += (list.empty() ? "" : ",") + e;
  return list;
}

std::string EtcdClient::localAddress() {
  std::lock_guard lock(mutex_);
  return connection_ ? connection_->localAddress() : "";
}

void EtcdClient::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_ = true;
  }
  shutdownChanged_.notify_all();
}

std::string EtcdClient::call(const std::string& target, const std::string& body,
                             std::optional<Clock::time_point> deadline) {
  std::unique_lock lock(mutex_);
  std::string errors;
  // A busy cluster (a leader election, proposals timing out under load) is
  // asked again, member after member, with a growing back-off until the
  // request timeout; an unreachable member is skipped at once. A deadline
  // bounds the whole call, every member tried included.
  const auto giveUpAt =
      std::min(Clock::now() + options_.requestTimeout, deadline.value_or(Clock::time_point::max()));
  auto backoff = std::chrono::milliseconds(20);
  std::size_t unreachable = 0;
  while (unreachable < options_.endpoints.size()) {
    if (shutdown_) throw NetworkError("the etcd client was shut down");
    if (deadline && Clock::now() >= *deadline) {
      throw TimeoutError(fmt::format("no etcd member answered in time ({})", errors));
    }
    if (!connection_) {
      connection_ = std::make_unique<HttpConnection>(options_, options_.endpoints[current_]);
    }
    try {
      ++requests_;
      // Under a deadline, a member that does not answer may take at most
      // half of what is left, so that the next member still has time.
      auto attemptEnds = Clock::now() + options_.requestTimeout;
      if (deadline) {
        const bool othersLeft = unreachable + 1 < options_.endpoints.size();
        attemptEnds = std::min(
            attemptEnds, othersLeft ? Clock::now() + (*deadline - Clock::now()) / 2 : *deadline);
      }
      return connection_->post(target, body, attemptEnds);
    } catch (const EtcdBusyError& e) {
      if (Clock::now() + backoff >= giveUpAt) {
        throw NetworkError(fmt::format(
            "etcd stayed busy for {} s ({})",
            std::chrono::duration_cast<std::chrono::seconds>(options_.requestTimeout).count(),
            e.what()));
      }
      connection_.reset();
      current_ = (current_ + 1) % options_.endpoints.size();
      shutdownChanged_.wait_for(lock, backoff + std::chrono::milliseconds(random_() % 20),
                                [this] { return shutdown_; });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    } catch (const ServerError&) {
      throw;
    } catch (const Error& e) {
      // NetworkError, TimeoutError: this member is gone or cut off.
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e.what());
      connection_.reset();
      current_ = (current_ + 1) % options_.endpoints.size();
      ++unreachable;
    }
  }
  throw NetworkError(fmt::format("no etcd member answered ({})", errors));
}

EtcdRange EtcdClient::get(const std::string& key) {
  EtcdRangeRequest request;
  request.key = key;
  return range(request);
}

EtcdRange EtcdClient::getPrefix(const std::string& prefix) {
  EtcdRangeRequest request;
  request.key = prefix;
  request.rangeEnd = etcdPrefixEnd(prefix);
  return range(request);
}

EtcdRange EtcdClient::range(const EtcdRangeRequest& r) {
  json request = rangeRequest(r.key, r.rangeEnd);
  if (r.limit > 0) request["limit"] = std::to_string(r.limit);
  if (r.countOnly) request["count_only"] = true;
  if (r.newestCreatedFirst) {
    request["sort_order"] = "DESCEND";
    request["sort_target"] = "CREATE";
  }
  if (r.maxCreateRevision > 0) request["max_create_revision"] = std::to_string(r.maxCreateRevision);
  const json reply = parse(call("/v3/kv/range", request.dump()));
  return rangeOf(reply, revisionOf(reply));
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease,
                             std::optional<EtcdKeyValue>* previous) {
  json request = {{"key", toBase64(key)}, {"value", toBase64(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  if (previous != nullptr) request["prev_kv"] = true;
  const json reply = parse(call("/v3/kv/put", request.dump()));
  if (previous != nullptr) {
    const auto kv = reply.find("prev_kv");
    *previous = kv == reply.end() ? std::nullopt : std::optional(keyValueOf(*kv));
  }
  return revisionOf(reply);
}

EtcdTxnResult EtcdClient::txn(const std::vector<EtcdCompare>& compares,
                              const std::vector<EtcdOp>& success,
                              const std::vector<EtcdOp>& failure) {
  json request = {
      {"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compares) {
    const bool create = c.target == EtcdCompare::Target::kCreate;
    request["compare"].push_back(
        {{"key", toBase64(c.key)},
         {"target", create ? "CREATE" : "MOD"},
         {"result", "EQUAL"},
         {create ? "create_revision" : "mod_revision", std::to_string(c.revision)}});
  }
  for (const auto& op : success) request["success"].push_back(operationJson(op));
  for (const auto& op : failure) request["failure"].push_back(operationJson(op));
  const json reply = parse(call("/v3/kv/txn", request.dump()));
  EtcdTxnResult result;
  result.succeeded = reply.value("succeeded", false);
  result.revision = revisionOf(reply);
  for (const auto& response : reply.value("responses", json::array())) {
    if (const auto range = response.find("response_range"); range != response.end()) {
      result.ranges.push_back(rangeOf(*range, result.revision));
    }
  }
  return result;
}

EtcdSwap EtcdClient::compareAndSwap(const std::string& key, std::int64_t expected,
                                    const std::string& value, std::int64_t lease,
                                    const std::string& alsoDeletePrefix) {
  std::vector<EtcdOp> success{EtcdOp::put(key, value, lease)};
  if (!alsoDeletePrefix.empty()) {
    success.push_back(EtcdOp::erase(alsoDeletePrefix, etcdPrefixEnd(alsoDeletePrefix)));
  }
  const EtcdTxnResult result =
      txn({EtcdCompare{key, EtcdCompare::Target::kMod, expected}}, success, {EtcdOp::read(key)});
  EtcdSwap swap;
  swap.succeeded = result.succeeded;
  swap.revision = result.revision;
  if (!result.succeeded && !result.ranges.empty() && !result.ranges.front().kvs.empty()) {
    swap.current = result.ranges.front().kvs.front();
  }
  return swap;
}

bool EtcdClient::compareAndDelete(const std::string& key, std::int64_t expected) {
  return txn({EtcdCompare{key, EtcdCompare::Target::kMod, expected}}, {EtcdOp::erase(key)})
      .succeeded;
}

void EtcdClient::deletePrefix(const std::string& prefix) {
  call("/v3/kv/deleterange", rangeRequest(prefix, etcdPrefixEnd(prefix)).dump());
}

std::int64_t EtcdClient::grantLease(std::chrono::seconds ttl) {
  const json reply = parse(call("/v3/lease/grant", json{{"TTL", ttl.count()}}.dump()));
  const std::int64_t id = int64Of(reply, "ID");
  if (id == 0) {
    throw ServerError(fmt::format("etcd granted no lease: {}", reply.value("error", "")));
  }
  return id;
}

std::int64_t EtcdClient::keepAliveLease(std::int64_t lease,
                                        std::optional<Clock::time_point> deadline) {
  // The gateway answers a one-message stream: {"result": {..., "TTL": "n"}}.
  const json reply =
      parse(call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), deadline));
  const auto result = reply.find("result");
  return result == reply.end() ? 0 : int64Of(*result, "TTL");
}

void EtcdClient::revokeLease(std::int64_t lease) {
  try {
    call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  } catch (const ServerError& e) {
    // Gone already (expired, or revoked by an attempt that etcd reported
    // as timed out and then carried out): what was asked for.
    if (std::string(e.what()).find("lease not found") == std::string::npos) throw;
  }
}

std::int64_t EtcdClient::leaseTimeToLive(std::int64_t lease) {
  const json reply =
      parse(call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump()));
  return int64Of(reply, "TTL");
}

// --- EtcdWatch -----------------------------------------------------------------

EtcdWatch::EtcdWatch(EtcdOptions options, std::string prefix, std::int64_t startRevision)
    : EtcdWatch(std::move(options), {{prefix, etcdPrefixEnd(prefix)}}, startRevision) {}

EtcdWatch::EtcdWatch(EtcdOptions options, std::vector<std::pair<std::string, std::string>> ranges,
                     std::int64_t startRevision)
    : options_(std::move(options)), current_(randomEndpoint(options_.endpoints.size())) {
  for (auto& [key, rangeEnd] : ranges) {
    ranges_.push_back(Range{std::move(key), std::move(rangeEnd), startRevision});
  }
}

EtcdWatch::~EtcdWatch() = default;

void EtcdWatch::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  if (connection_) connection_->cancel();
}

void EtcdWatch::sendCreate(const Range& range) {
  json request = rangeRequest(range.key, range.rangeEnd);
  if (range.nextRevision > 0) request["start_revision"] = std::to_string(range.nextRevision);
  connection_->writeMessage(json{{"create_request", request}}.dump(),
                            Clock::now() + options_.requestTimeout);
}

void EtcdWatch::open() {
  // A WebSocket on the gateway's watch: one create request a range, each
  // from the revision after the last one it saw.
  std::string errors;
  for (std::size_t tried = 0; tried < options_.endpoints.size(); ++tried) {
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
      connection_ = std::make_unique<HttpConnection>(options_, options_.endpoints[current_]);
    }
    created_ = 0;
    try {
      connection_->openWebSocket("/v3/watch", Clock::now() + options_.requestTimeout);
      for (const Range& range : ranges_) sendCreate(range);
      return;
    } catch (const ServerError&) {
      throw;
    } catch (const Error& e) {
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e.what());
      current_ = (current_ + 1) % options_.endpoints.size();
    }
  }
  std::lock_guard lock(mutex_);
  connection_.reset();
  throw NetworkError(fmt::format("no etcd member accepted a watch ({})", errors));
}

void EtcdWatch::dropConnection() {
  std::lock_guard lock(mutex_);
  connection_.reset();
  current_ = (current_ + 1) % options_.endpoints.size();
}

void EtcdWatch::start() {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
    }
    if (!connection_) open();
    if (created_ == ranges_.size()) return;
    try {
      // Events before the last creation are kept: next() returns them.
      auto events = handle(connection_->readMessage());
      pending_.insert(pending_.end(), events.begin(), events.end());
    } catch (const NetworkError&) {
      dropConnection();
    }
  }
}

void EtcdWatch::add(std::string key, std::string rangeEnd, std::int64_t startRevision) {
  ranges_.push_back(Range{std::move(key), std::move(rangeEnd), startRevision});
  if (!connection_) return;  // open() creates it with the others
  try {
    sendCreate(ranges_.back());
  } catch (const Error&) {
    dropConnection();  // next() opens a new stream, this range with it
  }
}

std::vector<EtcdWatchEvent> EtcdWatch::handle(const std::string& message) {
  const json parsed = parse(message);
  const auto result = parsed.find("result");
  if (result == parsed.end()) {
    throw ServerError(fmt::format("etcd's watch failed: {}", message.substr(0, 200)));
  }
  const std::int64_t watchId = int64Of(*result, "watch_id");
  if (result->value("canceled", false)) {
    if (const std::int64_t compacted = int64Of(*result, "compact_revision"); compacted > 0) {
      throw EtcdCompactedError(
          fmt::format("etcd compacted revision {} away while it was being watched", compacted));
    }
    throw ServerError(fmt::format("etcd cancelled the watch: {}",
                                  result->value("cancel_reason", std::string("no reason"))));
  }
  const std::int64_t revision = int64Of(result->value("header", json::object()), "revision");
  if (result->value("created", false)) {
    // etcd creates a stream's watchers in the order they were asked for.
    if (created_ < ranges_.size()) {
      Range& range = ranges_[created_++];
      range.watchId = watchId;
      // A watcher "from now" sees what follows this revision.
      if (range.nextRevision == 0) range.nextRevision = revision + 1;
    }
    return {};
  }
  Range* range = nullptr;
  for (std::size_t i = 0; i < created_; ++i) {
    if (ranges_[i].watchId == watchId) range = &ranges_[i];
  }
  std::vector<EtcdWatchEvent> events;
  for (const auto& e : result->value("events", json::array())) {
    EtcdWatchEvent event;
    event.deleted = e.value("type", "") == "DELETE";
    event.kv = keyValueOf(e.value("kv", json::object()));
    if (range != nullptr) {
      range->nextRevision = std::max(range->nextRevision, event.kv.modRevision + 1);
    }
    events.push_back(std::move(event));
  }
  events_ += events.size();
  return events;
}

std::vector<EtcdWatchEvent> EtcdWatch::next() {
  if (!pending_.empty()) return std::exchange(pending_, {});
  for (;;) {
    bool needOpen = false;
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
      needOpen = connection_ == nullptr;
    }
    if (needOpen) open();
    std::string message;
    try {
      message = connection_->readMessage();
    } catch (const Error&) {
      dropConnection();
      continue;
    }
    auto events = handle(message);
    if (!events.empty()) return events;
  }
}

}  // namespace ddprun::rendezvous
