#include "ddprun/rendezvous/store_client.h"

#include <fmt/format.h>

#include "connection.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::rendezvous {

using protocol::Status;
using Clock = std::chrono::steady_clock;

namespace {

// A waiting call's own deadline sits this far behind the server's, so the
// server's precise timeout reply normally arrives first.
constexpr auto kWaitGrace = std::chrono::seconds(5);
// A connection unused this long is checked for a goodbye before reuse.
constexpr auto kIdleCheckAfter = std::chrono::seconds(1);

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

void StoreClient::exchange(const protocol::Request& request, bool waits,
                           std::chrono::milliseconds waitTimeout,
                           const std::function<bool(std::string_view)>& decodeOk,
                           std::optional<Clock::time_point> givenDeadline) {
  Clock::time_point deadline;
  if (givenDeadline) {
    deadline = *givenDeadline;
  } else if (waits) {
    deadline = protocol::toTimeoutMs(waitTimeout) == protocol::kNoTimeout
                   ? Clock::time_point::max()
                   : Clock::now() + waitTimeout + kWaitGrace;
  } else {
    deadline = Clock::now() + options_.requestTimeout;
  }
  // Refused here what the server would refuse, before sending it.
  if (const auto refused = protocol::checkRequest(request, options_.limits); !refused.ok()) {
    throw ServerError(fmt::format("store {}: {}", endpoint_, refused.message));
  }
  const auto error = connection()->call(request, decodeOk, deadline);
  if (!error) return;
  switch (error->status) {
    case Status::kOk:
      return;
    case Status::kTimeout:
      throw AnsweredTimeoutError(fmt::format("store {}: {} (waited {} ms)", endpoint_,
                                             error->message, waitTimeout.count()));
    case Status::kAuthFailed:
      throw AuthError(fmt::format("store {}: {}", endpoint_, error->message));
    case Status::kClosed:
      throw RendezvousClosedError(fmt::format("store {}: {} (the job failed with exit code {})",
                                              endpoint_, error->message, error->failure.exitCode),
                                  static_cast<int>(error->failure.exitCode), error->failure.report);
    case Status::kExcluded:
      throw NodeExcludedError(fmt::format("store {}: {}", endpoint_, error->message));
    case Status::kBadRequest:
    case Status::kUnsupportedVersion:
    case Status::kGoodbye:
    case Status::kEvent:
      throw ProtocolError(fmt::format("store {}: {}", endpoint_, error->message));
    case Status::kTooLarge:
    case Status::kNotInteger:
    case Status::kStoreFull:
      throw ServerError(fmt::format("store {}: {}", endpoint_, error->message));
  }
  throw ProtocolError(fmt::format("store {}: unknown reply status", endpoint_));
}

void StoreClient::set(const std::string& key, std::string_view value) {
  call(protocol::Set{.key = key, .value = std::string(value)});
}

std::string StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  return std::move(call(protocol::Get{.key = key}, timeout).value);
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  return call(protocol::Add{.key = key, .delta = delta}).value;
}

std::string StoreClient::compareSet(const std::string& key, std::string_view expected,
                                    std::string_view desired) {
  return std::move(
      call(protocol::CompareSet{
               .key = key, .expected = std::string(expected), .desired = std::string(desired)})
          .value);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return call(protocol::Check{.keys = keys}).value;
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  call(protocol::Wait{.keys = keys}, timeout);
}

bool StoreClient::deleteKey(const std::string& key) {
  return call(protocol::DeleteKey{.key = key}).value;
}

std::int64_t StoreClient::numKeys() { return call(protocol::NumKeys{}).value; }

std::vector<std::string> StoreClient::multiGet(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  protocol::ValuesReply reply = call(protocol::MultiGet{.keys = keys}, timeout);
  if (reply.values.size() != keys.size()) {
    throw ProtocolError(fmt::format("store {}: MULTI_GET of {} returned {} values", endpoint_,
                                    describeKeys(keys), reply.values.size()));
  }
  return std::move(reply.values);
}

std::vector<std::string> StoreClient::valuesNow(const std::vector<std::string>& keys) {
  protocol::ValuesReply reply;
  exchange(protocol::MultiGet{.timeoutMs = protocol::kNoWait, .keys = keys}, false, {},
           [&reply](std::string_view body) { return protocol::decodeReply(body, reply); });
  if (reply.values.size() != keys.size()) {
    throw ProtocolError(fmt::format("store {}: MULTI_GET of {} returned {} values", endpoint_,
                                    describeKeys(keys), reply.values.size()));
  }
  return std::move(reply.values);
}

void StoreClient::multiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  protocol::MultiSet request;
  request.keys.reserve(items.size());
  request.values.reserve(items.size());
  for (const auto& [key, value] : items) {
    request.keys.push_back(key);
    request.values.push_back(value);
  }
  call(std::move(request));
}

void StoreClient::append(const std::string& key, std::string_view value) {
  call(protocol::Append{.key = key, .value = std::string(value)});
}

void StoreClient::shutdown() {
  std::lock_guard lock(mutex_);
  shutDown_ = true;
  connection_->shutdown();
}

void StoreClient::ping(std::optional<Clock::time_point> deadline) {
  protocol::Ping::Reply reply;
  exchange(
      protocol::Request(protocol::Ping{}), false, {},
      [&reply](std::string_view body) { return protocol::decodeReply(body, reply); }, deadline);
}

std::string StoreClient::localAddress() { return connection()->localAddress(); }

}  // namespace ddprun::rendezvous
