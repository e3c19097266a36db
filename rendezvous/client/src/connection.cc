#include "connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/tcp_liveness.h"
#include "ddprun/rendezvous/reply_reader.h"
#include "ddprun/rendezvous/store_client.h"
#include "ddprun/rendezvous/tcp_connect.h"
#include "poll_timeout.h"

namespace ddprun::rendezvous {

using protocol::Status;

namespace {

// Replies carry at most a MULTI_GET of values within the server's frame
// limit; anything beyond this bound is refused before allocating.
constexpr std::size_t kMaxReplyFrame = std::size_t{1} << 30;

}  // namespace

std::shared_ptr<Connection> Connection::open(const StoreClientOptions& options,
                                             Clock::time_point deadline) {
  const int fd = connectWithBackoff(options.host, options.port, deadline, options.cancelConnect,
                                    options.sourceAddress);
  if (options.silenceLimit.count() > 0) {
    setTcpSilenceLimit(fd, options.silenceLimit);
  }
  std::shared_ptr<Connection> connection(new Connection(fd, hostPort(options.host, options.port)));
  connection->sendAll(std::string(protocol::kPreamble), deadline);
  protocol::HelloReply welcome;
  const auto refused = connection->call(
      protocol::Hello{
          .version = protocol::kVersion, .token = options.token, .clientName = options.name},
      [&welcome](std::string_view body) { return protocol::decodeReply(body, welcome); }, deadline);
  if (refused) {
    // The server refuses with a frame of id 0, which call() turns into an
    // exception; a non-ok reply to the HELLO id is equally final.
    throw ProtocolError(fmt::format("the store at {} refused the handshake: {}",
                                    connection->endpoint_, refused->message));
  }
  return connection;
}

std::string Connection::localAddress() const {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  char host[NI_MAXHOST] = {};
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &length) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&local), length, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}

void Connection::boundReceive(Clock::time_point deadline) {
  // SO_RCVTIMEO is changed only when the current bound would overshoot the
  // deadline by more than the slack, or is far shorter than needed: calls
  // with the same timeout then make no extra system call.
  constexpr auto kSlack = std::chrono::milliseconds(10);
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  const auto wanted = std::clamp(left, std::chrono::microseconds(1000),
                                 std::chrono::microseconds(std::chrono::hours(24 * 365)));
  if (receiveBound_ <= wanted + kSlack && receiveBound_ * 2 >= wanted) return;
  timeval tv{static_cast<time_t>(wanted.count() / 1000000),
             static_cast<suseconds_t>(wanted.count() % 1000000)};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  receiveBound_ = wanted;
}

Connection::Connection(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {
  // Blocking for receives (bounded by SO_RCVTIMEO); sends pass MSG_DONTWAIT.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  lastUse_ = Clock::now().time_since_epoch().count();
}

Connection::~Connection() { ::close(fd_); }

std::uint32_t Connection::nextRequestId() {
  std::uint32_t id = nextId_.fetch_add(1);
  if (id == 0) id = nextId_.fetch_add(1);  // 0 is reserved for pushes
  return id;
}

void Connection::sendAll(const std::string& bytes, Clock::time_point deadline) {
  std::lock_guard lock(sendMutex_);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      markBroken(Status::kOk, fmt::format("sending to the store at {} failed: {}", endpoint_,
                                          std::strerror(errno)));
      throwBroken();
    }
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, pollTimeoutMs(deadline)) == 0) {
      // Part of a frame may be out: the stream can no longer be trusted.
      markBroken(Status::kOk, fmt::format("sending to the store at {} timed out", endpoint_));
      throw TimeoutError(fmt::format(
          "sending a request to the store at {} timed out; the server is not reading", endpoint_));
    }
  }
}

std::optional<protocol::ErrorReply> Connection::call(const protocol::Request& request,
                                                     const DecodeOk& decodeOk,
                                                     Clock::time_point deadline) {
  thread_local std::string frame;
  frame.clear();
  const std::uint32_t id = nextRequestId();
  protocol::encodeRequest(frame, id, request);
  Slot slot;
  slot.op = protocol::opOf(request);
  slot.decodeOk = &decodeOk;
  {
    std::lock_guard lock(mutex_);
    if (broken_) throwBroken();
    pending_.emplace(id, &slot);
  }
  lastUse_ = Clock::now().time_since_epoch().count();
  try {
    sendAll(frame, deadline);
  } catch (...) {
    std::lock_guard lock(mutex_);
    pending_.erase(id);
    throw;
  }
  std::unique_lock lock(mutex_);
  while (!slot.done) {
    if (broken_) {
      pending_.erase(id);
      throwBroken();
    }
    if (!readerActive_) {
      readerActive_ = true;
      lock.unlock();
      readUntil([&slot] { return slot.done; }, deadline);
      lock.lock();
      readerActive_ = false;
      delivered_.notify_all();  // let another caller take over reading
    } else {
      delivered_.wait_until(lock, deadline);
    }
    if (!slot.done && !broken_ && Clock::now() >= deadline) {
      pending_.erase(id);
      throw TimeoutError(fmt::format("the store at {} did not answer {} in time", endpoint_,
                                     protocol::opName(slot.op)));
    }
  }
  lastUse_ = Clock::now().time_since_epoch().count();
  return std::move(slot.error);
}

bool Connection::readUntil(const std::function<bool()>& done, Clock::time_point deadline) {
  for (;;) {
    dispatchFrames();
    {
      std::lock_guard lock(mutex_);
      if (done()) return true;
      if (broken_) return false;
    }
    if (Clock::now() >= deadline) return false;
    boundReceive(deadline);
    std::size_t space = 0;
    char* tail = input_.writable(0, space);
    // A blocking receive bounded by SO_RCVTIMEO: one system call per reply
    // instead of poll + recv.
    const ssize_t n = ::recv(fd_, tail, space, 0);
    if (n > 0) {
      input_.commit(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    markBroken(Status::kOk, n == 0 ? fmt::format("the store at {} closed the connection", endpoint_)
                                   : fmt::format("receiving from the store at {} failed: {}",
                                                 endpoint_, std::strerror(errno)));
    return false;
  }
}

void Connection::dispatchFrames() {
  const auto tooLarge = readReplies(input_, kMaxReplyFrame, [this](ReceivedFrame& frame) {
    using Kind = ReceivedFrame::Kind;
    if (frame.kind == Kind::kEvent) {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(frame.event));
      delivered_.notify_all();
      return true;
    }
    if (frame.kind == Kind::kGoodbye) {
      markBroken(Status::kGoodbye, fmt::format("the store at {} closed the connection: {}",
                                               endpoint_, frame.error.message));
      goodbye_ = true;
      return true;
    }
    if (frame.kind == Kind::kRefusal) {
      markBroken(frame.error.status, frame.error.message);
      return true;
    }
    std::lock_guard lock(mutex_);
    auto it = pending_.find(frame.requestId);
    if (it == pending_.end()) return true;  // a late reply to a timed-out call
    Slot& slot = *it->second;
    if (frame.status != Status::kOk) {
      slot.error = std::move(frame.error);
    } else if (!(*slot.decodeOk)(frame.body)) {
      slot.error = protocol::ErrorReply{
          Status::kBadRequest,
          fmt::format("the server's OK reply to {} has a malformed body of {} bytes",
                      protocol::opName(slot.op), frame.body.size()),
          {}};
    }
    slot.done = true;
    pending_.erase(it);
    delivered_.notify_all();
    return true;
  });
  if (tooLarge) {
    // Nothing a ddprun server sends is this large: the stream is not ours.
    markBroken(Status::kBadRequest, fmt::format("{} (the store at {})", *tooLarge, endpoint_));
  }
}

std::optional<protocol::Event> Connection::waitEvent(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  while (events_.empty()) {
    if (broken_) throwBroken();
    if (!readerActive_) {
      readerActive_ = true;
      lock.unlock();
      readUntil([this] { return !events_.empty(); }, deadline);
      lock.lock();
      readerActive_ = false;
      delivered_.notify_all();
    } else {
      delivered_.wait_until(lock, deadline);
    }
    if (events_.empty() && !broken_ && Clock::now() >= deadline) return std::nullopt;
  }
  protocol::Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Connection::shutdown() {
  markBroken(Status::kOk,
             fmt::format("the connection to the store at {} was shut down", endpoint_));
  ::shutdown(fd_, SHUT_RDWR);
}

void Connection::drainPushes() {
  {
    std::lock_guard lock(mutex_);
    if (readerActive_ || broken_) return;
    readerActive_ = true;
  }
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) {
    std::size_t space = 0;
    char* tail = input_.writable(0, space);
    const ssize_t n = ::recv(fd_, tail, space, MSG_DONTWAIT);
    if (n > 0) {
      input_.commit(static_cast<std::size_t>(n));
      dispatchFrames();
    } else if (n == 0) {
      markBroken(Status::kOk, fmt::format("the store at {} closed the connection", endpoint_));
    }
  }
  std::lock_guard lock(mutex_);
  readerActive_ = false;
  delivered_.notify_all();
}

void Connection::markBroken(Status status, std::string reason) {
  std::lock_guard lock(mutex_);
  if (broken_) return;
  brokenStatus_ = status;
  brokenReason_ = std::move(reason);
  broken_ = true;
  delivered_.notify_all();
}

void Connection::throwBroken() {
  // Called with or without mutex_ held; reads fields that no longer change
  // once broken_ is set.
  switch (brokenStatus_) {
    case Status::kAuthFailed:
      throw AuthError(
          fmt::format("the store at {} refused this client: {}", endpoint_, brokenReason_));
    case Status::kUnsupportedVersion:
    case Status::kBadRequest:
    case Status::kTooLarge:
      throw ProtocolError(
          fmt::format("the store at {} refused this client: {}", endpoint_, brokenReason_));
    default:
      throw NetworkError(brokenReason_);
  }
}

}  // namespace ddprun::rendezvous
