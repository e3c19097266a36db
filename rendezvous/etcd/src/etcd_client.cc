#include "ddprun/rendezvous/etcd_client.h"

#include <openssl/evp.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

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

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
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
  std::lock_guard lock(mutex_);
  shutdown_ = true;
}

std::string EtcdClient::call(const std::string& target, const std::string& body) {
  std::lock_guard lock(mutex_);
  std::string errors;
  for (std::size_t tried = 0; tried < options_.endpoints.size(); ++tried) {
    if (shutdown_) throw NetworkError("the etcd client was shut down");
    if (!connection_) {
      connection_ = std::make_unique<HttpConnection>(options_, options_.endpoints[current_]);
    }
    try {
      ++requests_;
      return connection_->post(target, body, Clock::now() + options_.requestTimeout);
    } catch (const ServerError&) {
      throw;
    } catch (const Error& e) {
      // NetworkError, TimeoutError: this member is gone or cut off.
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e.what());
      connection_.reset();
      current_ = (current_ + 1) % options_.endpoints.size();
    }
  }
  throw NetworkError(fmt::format("no etcd member answered ({})", errors));
}

EtcdRange EtcdClient::get(const std::string& key) {
  const json reply = parse(call("/v3/kv/range", rangeRequest(key, "").dump()));
  EtcdRange range;
  range.revision = revisionOf(reply);
  for (const auto& kv : reply.value("kvs", json::array())) range.kvs.push_back(keyValueOf(kv));
  return range;
}

EtcdRange EtcdClient::getPrefix(const std::string& prefix) {
  const json reply =
      parse(call("/v3/kv/range", rangeRequest(prefix, etcdPrefixEnd(prefix)).dump()));
  EtcdRange range;
  range.revision = revisionOf(reply);
  for (const auto& kv : reply.value("kvs", json::array())) range.kvs.push_back(keyValueOf(kv));
  return range;
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json request = {{"key", toBase64(key)}, {"value", toBase64(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  return revisionOf(parse(call("/v3/kv/put", request.dump())));
}

EtcdSwap EtcdClient::compareAndSwap(const std::string& key, std::int64_t expected,
                                    const std::string& value, std::int64_t lease,
                                    const std::string& alsoDeletePrefix) {
  json put = {{"key", toBase64(key)}, {"value", toBase64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  json success = json::array({{{"request_put", put}}});
  if (!alsoDeletePrefix.empty()) {
    success.push_back({{"request_delete_range",
                        rangeRequest(alsoDeletePrefix, etcdPrefixEnd(alsoDeletePrefix))}});
  }
  const json request = {{"compare", json::array({{{"key", toBase64(key)},
                                                  {"target", "MOD"},
                                                  {"result", "EQUAL"},
                                                  {"mod_revision", std::to_string(expected)}}})},
                        {"success", success},
                        {"failure", json::array({{{"request_range", rangeRequest(key, "")}}})}};
  const json reply = parse(call("/v3/kv/txn", request.dump()));
  EtcdSwap swap;
  swap.succeeded = reply.value("succeeded", false);
  swap.revision = revisionOf(reply);
  if (!swap.succeeded) {
    for (const auto& response : reply.value("responses", json::array())) {
      const auto range = response.find("response_range");
      if (range == response.end()) continue;
      for (const auto& kv : range->value("kvs", json::array())) swap.current = keyValueOf(kv);
    }
  }
  return swap;
}

bool EtcdClient::compareAndDelete(const std::string& key, std::int64_t expected) {
  const json request = {
      {"compare", json::array({{{"key", toBase64(key)},
                                {"target", "MOD"},
                                {"result", "EQUAL"},
                                {"mod_revision", std::to_string(expected)}}})},
      {"success", json::array({{{"request_delete_range", {{"key", toBase64(key)}}}}})}};
  return parse(call("/v3/kv/txn", request.dump())).value("succeeded", false);
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

std::int64_t EtcdClient::keepAliveLease(std::int64_t lease) {
  // The gateway answers a one-message stream: {"result": {..., "TTL": "n"}}.
  const json reply = parse(call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  const auto result = reply.find("result");
  return result == reply.end() ? 0 : int64Of(*result, "TTL");
}

void EtcdClient::revokeLease(std::int64_t lease) {
  call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
}

// --- EtcdWatch -----------------------------------------------------------------

EtcdWatch::EtcdWatch(EtcdOptions options, std::string prefix, std::int64_t startRevision)
    : options_(std::move(options)), prefix_(std::move(prefix)), nextRevision_(startRevision) {}

EtcdWatch::~EtcdWatch() = default;

void EtcdWatch::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  if (connection_) connection_->cancel();
}

void EtcdWatch::open() {
  const json create = {{"create_request",
                        {{"key", toBase64(prefix_)},
                         {"range_end", toBase64(etcdPrefixEnd(prefix_))},
                         {"start_revision", std::to_string(nextRevision_)}}}};
  std::string errors;
  for (std::size_t tried = 0; tried < options_.endpoints.size(); ++tried) {
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
      connection_ = std::make_unique<HttpConnection>(options_, options_.endpoints[current_]);
    }
    try {
      connection_->openStream("/v3/watch", create.dump(), Clock::now() + options_.requestTimeout);
      return;
    } catch (const Error& e) {
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e.what());
      current_ = (current_ + 1) % options_.endpoints.size();
    }
  }
  std::lock_guard lock(mutex_);
  connection_.reset();
  throw NetworkError(fmt::format("no etcd member accepted a watch ({})", errors));
}

std::vector<EtcdWatchEvent> EtcdWatch::next() {
  for (;;) {
    bool needOpen = false;
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
      needOpen = connection_ == nullptr;
    }
    if (needOpen) open();
    std::string line;
    try {
      line = connection_->readLine();
    } catch (const ServerError&) {
      throw;
    } catch (const Error&) {
      // The member went away: resume on the next one from the last revision.
      std::lock_guard lock(mutex_);
      if (cancelled_) throw Error("the etcd watch was cancelled");
      connection_.reset();
      current_ = (current_ + 1) % options_.endpoints.size();
      continue;
    }
    const json message = parse(line);
    const auto result = message.find("result");
    if (result == message.end()) {
      throw ServerError(fmt::format("etcd's watch failed: {}", line.substr(0, 200)));
    }
    if (result->value("canceled", false)) {
      if (const std::int64_t compacted = int64Of(*result, "compact_revision"); compacted > 0) {
        throw EtcdCompactedError(fmt::format(
            "etcd compacted revision {} away while it was being watched", nextRevision_));
      }
      throw ServerError(fmt::format("etcd cancelled the watch: {}",
                                    result->value("cancel_reason", std::string("no reason"))));
    }
    std::vector<EtcdWatchEvent> events;
    for (const auto& e : result->value("events", json::array())) {
      EtcdWatchEvent event;
      event.deleted = e.value("type", "") == "DELETE";
      event.kv = keyValueOf(e.value("kv", json::object()));
      nextRevision_ = std::max(nextRevision_, event.kv.modRevision + 1);
      events.push_back(std::move(event));
    }
    events_ += events.size();
    if (!events.empty()) return events;
  }
}

}  // namespace ddprun::rendezvous
