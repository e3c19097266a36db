#include "ddprun/rendezvous/store_client.h"

#include <fmt/format.h>

#include <cstdlib>

#include "connection.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::rendezvous {

using protocol::Op;
using protocol::Reply;
using protocol::Request;
using protocol::Status;
using Clock = std::chrono::steady_clock;

namespace {

// A waiting call's own deadline sits this far behind the server's, so the
// server's precise timeout reply normally arrives first.
constexpr auto kWaitGrace = std::chrono::seconds(5);
// A connection unused this long is checked for a goodbye before reuse.
constexpr auto kIdleCheckAfter = std::chrono::seconds(1);

Request makeRequest(Op op, std::vector<std::string> keys = {},
                    std::vector<std::string> values = {}) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// Refuses locally what the server would refuse, before sending it.
void checkLimits(const Request& r, const protocol::Limits& limits, const std::string& endpoint) {
  if (r.keys.size() > limits.maxKeysPerRequest) {
    throw ServerError(fmt::format("store {}: {} keys in one {} is over the limit of {}", endpoint,
                                  r.keys.size(), protocol::opName(r.op), limits.maxKeysPerRequest));
  }
  std::size_t total = 0;
  for (const auto& key : r.keys) {
    if (key.size() > limits.maxKeyBytes) {
      throw ServerError(fmt::format("store {}: a key of {} bytes is over the limit of {} bytes",
                                    endpoint, key.size(), limits.maxKeyBytes));
    }
    total += key.size() + 4;
  }
  for (const auto& value : r.values) {
    if (value.size() > limits.maxValueBytes) {
      throw ServerError(fmt::format("store {}: a value of {} bytes is over the limit of {} bytes",
                                    endpoint, value.size(), limits.maxValueBytes));
    }
    total += value.size() + 4;
  }
  if (total > limits.maxFrameBytes) {
    throw ServerError(
        fmt::format("store {}: a {} request of {} bytes is over the frame limit of "
                    "{} bytes; split it",
                    endpoint, protocol::opName(r.op), total, limits.maxFrameBytes));
  }
}

std::string describeKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "'" : ", '") + key + "'";
  return out;
}

}  // namespace

StoreClient::StoreClient(StoreClientOptions options)
    : options_(std::move(options)), endpoint_(hostPort(options_.host, options_.port)) {
  connection_ = Connection::open(options_, Clock::now() + options_.connectTimeout);
}

StoreClient::~StoreClient() = default;

std::shared_ptr<Connection> StoreClient::connection() {
  std::lock_guard lock(mutex_);
  if (!connection_->broken() && Clock::now() - connection_->lastUse() > kIdleCheckAfter) {
    connection_->drainPushes();
  }
  if (connection_->saidGoodbye() && !shutDown_) {
    // The server closed an idle connection politely: nothing was in flight,
    // so a fresh connection continues transparently.
    connection_ = Connection::open(options_, Clock::now() + options_.connectTimeout);
  }
  return connection_;
}

Reply StoreClient::call(Request& request, std::chrono::milliseconds waitTimeout) {
  Clock::time_point deadline;
  if (request.op == Op::kGet || request.op == Op::kWait || request.op == Op::kMultiGet ||
      request.op == Op::kJoin) {
    request.timeoutMs = protocol::toTimeoutMs(waitTimeout);
    deadline = request.timeoutMs == protocol::kNoTimeout ? Clock::time_point::max()
                                                         : Clock::now() + waitTimeout + kWaitGrace;
  } else {
    deadline = Clock::now() + options_.requestTimeout;
  }
  checkLimits(request, options_.limits, endpoint_);
  Reply reply = connection()->call(request, deadline);
  switch (reply.status) {
    case Status::kOk:
      return reply;
    case Status::kTimeout:
      throw TimeoutError(fmt::format("store {}: {} (waited {} ms)", endpoint_, reply.message,
                                     waitTimeout.count()));
    case Status::kAuthFailed:
      throw AuthError(fmt::format("store {}: {}", endpoint_, reply.message));
    case Status::kClosed:
      throw RendezvousClosedError(fmt::format("store {}: {} (the job failed with exit code {})",
                                              endpoint_, reply.message, reply.failure.exitCode),
                                  static_cast<int>(reply.failure.exitCode), reply.failure.report);
    case Status::kBadRequest:
    case Status::kUnsupportedVersion:
    case Status::kGoodbye:
    case Status::kEvent:
      throw ProtocolError(fmt::format("store {}: {}", endpoint_, reply.message));
    case Status::kTooLarge:
    case Status::kNotInteger:
    case Status::kStoreFull:
      throw ServerError(fmt::format("store {}: {}", endpoint_, reply.message));
  }
  throw ProtocolError(fmt::format("store {}: unknown reply status", endpoint_));
}

void StoreClient::set(const std::string& key, std::string_view value) {
  Request r = makeRequest(Op::kSet, {key}, {std::string(value)});
  call(r, {});
}

std::string StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  Request r = makeRequest(Op::kGet, {key});
  return std::move(call(r, timeout).values.at(0));
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  Request r = makeRequest(Op::kAdd, {key});
  r.delta = delta;
  return call(r, {}).integer;
}

std::string StoreClient::compareSet(const std::string& key, std::string_view expected,
                                    std::string_view desired) {
  Request r = makeRequest(Op::kCompareSet, {key}, {std::string(expected), std::string(desired)});
  return std::move(call(r, {}).values.at(0));
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  Request r = makeRequest(Op::kCheck, keys);
  return call(r, {}).flag;
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Request r = makeRequest(Op::kWait, keys);
  call(r, timeout);
}

bool StoreClient::deleteKey(const std::string& key) {
  Request r = makeRequest(Op::kDeleteKey, {key});
  return call(r, {}).flag;
}

std::int64_t StoreClient::numKeys() {
  Request r = makeRequest(Op::kNumKeys);
  return call(r, {}).integer;
}

std::vector<std::string> StoreClient::multiGet(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  Request r = makeRequest(Op::kMultiGet, keys);
  Reply reply = call(r, timeout);
  if (reply.values.size() != keys.size()) {
    throw ProtocolError(fmt::format("store {}: MULTI_GET of {} returned {} values", endpoint_,
                                    describeKeys(keys), reply.values.size()));
  }
  return std::move(reply.values);
}

void StoreClient::multiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  Request r = makeRequest(Op::kMultiSet);
  for (const auto& [key, value] : items) {
    r.keys.push_back(key);
    r.values.push_back(value);
  }
  call(r, {});
}

void StoreClient::append(const std::string& key, std::string_view value) {
  Request r = makeRequest(Op::kAppend, {key}, {std::string(value)});
  call(r, {});
}

void StoreClient::shutdown() {
  std::lock_guard lock(mutex_);
  shutDown_ = true;
  connection_->shutdown();
}

void StoreClient::ping() {
  Request r = makeRequest(Op::kPing, {}, {std::string()});
  call(r, {});
}

}  // namespace ddprun::rendezvous
