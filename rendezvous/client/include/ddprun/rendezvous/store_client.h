// StoreClient: the one client of the ddprun store, used by the agent and by
// the worker library.
//
// It connects with retry and exponential backoff until a deadline, sends the
// token in the handshake, and then carries any number of concurrent calls
// on one connection: every request has an id, and whichever calling thread
// is waiting reads replies for all of them (no background thread, so a
// lone caller pays exactly one round trip). A heartbeat from one thread
// while another blocks in wait() is the intended use.
//
// Example:
//   StoreClientOptions options{.host = "127.0.0.1", .port = 29400,
//                              .token = *ddprun::tokenFromEnv("DDPRUN_TOKEN")};
//   StoreClient client(options);
//   client.set("ready/3", "1");
//   client.wait({"go"}, std::chrono::seconds(60));
//
// Errors: TimeoutError, NetworkError, AuthError, ProtocolError, ServerError
// (all ddprun::Error), with messages that name the server and the key.
// Thread-safety: every method may be called from several threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/common/error.h"

#include "ddprun/rendezvous/protocol.h"
#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

class Connection;

// JOIN found the rendezvous closed: the job failed and has no restarts
// left. Carries the failing node's exit code and report.
class RendezvousClosedError : public Error {
 public:
  RendezvousClosedError(const std::string& message, int exitCode, std::string report)
      : Error(message), exitCode_(exitCode), report_(std::move(report)) {}
  int exitCode() const { return exitCode_; }
  const std::string& report() const { return report_; }

 private:
  int exitCode_;
  std::string report_;
};

// JOIN refused: this node's host failed in too many rounds in a row and is
// left out of the rendezvous for a cooldown (the message says until when).
class NodeExcludedError : public Error {
 public:
  using Error::Error;
};

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string token;
  // Total time to keep trying to connect (the server may still be starting).
  std::chrono::milliseconds connectTimeout{std::chrono::seconds(60)};
  // Bound on every call that does not wait for keys.
  std::chrono::milliseconds requestTimeout{std::chrono::seconds(60)};
  // A server that goes silent (its host cut off, frozen) fails the
  // connection after about this long: TCP keep-alive and TCP_USER_TIMEOUT
  // (common/tcp_liveness.h). Zero: the kernel's defaults.
  std::chrono::milliseconds silenceLimit{0};
  // A numeric address of this host to connect from (--local_addr): the
  // server then sees the client there, or connecting fails with a
  // ConfigError saying that address cannot reach it. Empty: any.
  std::string sourceAddress;
  // Shown in the server's logs.
  std::string name = "client";
  protocol::Limits limits;
  // Set to true (from another thread) to abandon connecting.
  const std::atomic<bool>* cancelConnect = nullptr;
};

class StoreClient : public Store {
 public:
  // Connects and authenticates. Throws TimeoutError/NetworkError when the
  // server cannot be reached before connectTimeout, AuthError on a wrong
  // token, ProtocolError when the peer is not a compatible ddprun store.
  explicit StoreClient(StoreClientOptions options);
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compareSet(const std::string& key, std::string_view expected,
                         std::string_view desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool deleteKey(const std::string& key) override;
  std::int64_t numKeys() override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::pair<std::string, std::string>>& items) override;
  // The values now, without waiting: a missing key reads as "" (protocol
  // version 6's MULTI_GET without wait).
  std::vector<std::string> valuesNow(const std::vector<std::string>& keys);
  void append(const std::string& key, std::string_view value) override;

  // One round trip; throws if the server does not answer in requestTimeout
  // (TimeoutError), or by `deadline` when one is given.
  void ping(std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  // The address of this host the connection leaves from: what the server
  // sees this client as ("" when it cannot be read).
  std::string localAddress();

  // Unblocks every call in progress (they throw NetworkError) and makes
  // later calls fail: for stopping a thread blocked in a call (or in
  // RendezvousClient::waitEvent()).
  void shutdown();

  // "host:port" of the server, for messages.
  const std::string& endpoint() const { return endpoint_; }
  const StoreClientOptions& options() const { return options_; }

 private:
  friend class RendezvousClient;  // its calls share this connection

  // Sends a request of type M and returns its typed OK reply; any other
  // reply throws (see exchange()). Requests that wait (they have a
  // timeout field) wait up to `waitTimeout` on the server.
  template <typename M>
  typename M::Reply call(M message, std::chrono::milliseconds waitTimeout = {});
  // Sends `request`, hands an OK reply's body to `decodeOk`, and throws
  // the error an error reply stands for (TimeoutError, AuthError,
  // RendezvousClosedError, ProtocolError, ServerError).
  void exchange(const protocol::Request& request, bool waits, std::chrono::milliseconds waitTimeout,
                const std::function<bool(std::string_view)>& decodeOk,
                std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  std::shared_ptr<Connection> connection();

  StoreClientOptions options_;
  std::string endpoint_;
  std::mutex mutex_;  // guards connection_ (not the calls on it)
  std::shared_ptr<Connection> connection_;
  bool shutDown_ = false;
};

template <typename M>
typename M::Reply StoreClient::call(M message, std::chrono::milliseconds waitTimeout) {
  constexpr bool kWaits = requires(M & m) { m.timeoutMs; };
  if constexpr (kWaits) message.timeoutMs = protocol::toTimeoutMs(waitTimeout);
  typename M::Reply reply;
  exchange(protocol::Request(std::move(message)), kWaits, waitTimeout,
           [&reply](std::string_view body) { return protocol::decodeReply(body, reply); });
  return reply;
}

}  // namespace ddprun::rendezvous
