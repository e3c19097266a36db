#include "tcpstore_session.h"

#include <fmt/format.h>

#include "ddprun/common/logging.h"
#include "server_context.h"
#include "transport.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;

namespace {

const char* describe(StoreResult result) {
  switch (result) {
    case StoreResult::kOk:
      return "done";
    case StoreResult::kFull:
      return "the store is full";
    case StoreResult::kNotInteger:
      return "the value is not a decimal integer, or the sum leaves the 64-bit range";
    case StoreResult::kValueTooLarge:
      return "the value would pass the largest value allowed";
  }
  return "unknown";
}

}  // namespace

TcpStoreSession::TcpStoreSession(Transport& transport, tcpstore::Dialect dialect)
    : transport_(transport),
      context_(transport.context()),
      decoder_(dialect, tcpstore::decoderLimits(context_.options.limits)) {}

void TcpStoreSession::closing(const std::string&) { dropWait(); }

void TcpStoreSession::closeBecause(const std::string& why) {
  context_.closedLog.warn(
      fmt::format("Closing the TCPStore connection of {}: {}.", transport_.peer(), why));
  transport_.close();
}

void TcpStoreSession::dropWait() {
  if (!wait_) return;
  context_.state.removeWaiter(*wait_);
  wait_.reset();
  waitTimer_.reset();
  context_.syncWaiters();
}

bool TcpStoreSession::process() {
  for (;;) {
    tcpstore::Request r;
    std::size_t used = 0;
    std::string error;
    const tcpstore::Parse parse = decoder_.feed(transport_.input().readable(), used, r, error);
    transport_.input().consume(used);
    switch (parse) {
      case tcpstore::Parse::kNeedMore:
        if (transport_.input().readable().empty()) transport_.input().shrinkTo(kIdleBufferBytes);
        return true;
      case tcpstore::Parse::kError:
        closeBecause(error);
        return false;
      case tcpstore::Parse::kRequest:
        break;
    }
    transport_.markProven();
    context_.counters.requests++;
    context_.metrics.tcpstoreOperations[tcpstore::opName(r.op)]++;
    for (const auto& key : r.keys) {
      if (!protocol::isControlKey(key)) continue;
      closeBecause(fmt::format("it named the control key '{}', which only ddprun's agents may use",
                               printable(key)));
      return false;
    }
    // The client serialises its calls: a new request means a pending wait
    // was abandoned (1.13 times out silently) or is being cancelled.
    dropWait();
    handle(r);
    if (transport_.closed()) return false;
  }
}

void TcpStoreSession::handle(tcpstore::Request& r) {
  using tcpstore::Op;
  StoreState& state = context_.state;
  std::string& out = transport_.output();
  // This protocol has no error reply: a write the store refuses closes the
  // connection, so the client sees an error instead of a lost write.
  const auto refused = [&](StoreResult result) {
    if (result == StoreResult::kOk) return false;
    closeBecause(fmt::format("a write was refused ({})", describe(result)));
    return true;
  };
  // Replies are sized before they are built: one too large for the frame
  // limit or the server's budget closes the connection (no error reply).
  const auto tooLarge = [&](std::size_t bytes) {
    if (transport_.reserveReply(bytes)) return false;
    closeBecause(fmt::format(
        "its reply would be {} bytes, over the frame limit or the server's buffer budget", bytes));
    return true;
  };
  const auto valueBytes = [&](const std::string& key) {
    const std::string* value = state.find(key);
    return 8 + (value ? value->size() : 0);
  };
  switch (r.op) {
    case Op::kValidate:
      break;  // only valid first; a repeat is harmless
    case Op::kPing:
      tcpstore::putU32(out, r.word);
      break;
    case Op::kSet:
      if (refused(state.set(r.keys[0], std::move(r.values[0])))) return;
      break;
    case Op::kAppend:
      if (refused(state.append(r.keys[0], r.values[0]))) return;
      break;
    case Op::kCompareSet: {
      std::string result;
      if (refused(state.compareSet(r.keys[0], r.values[0], std::move(r.values[1]), result))) {
        return;
      }
      tcpstore::putString(out, result);
      break;
    }
    case Op::kGet: {
      if (tooLarge(valueBytes(r.keys[0]))) return;
      const std::string* value = state.find(r.keys[0]);
      tcpstore::putString(out, value ? *value : std::string());
      break;
    }
    case Op::kAdd: {
      std::int64_t result = 0;
      if (refused(state.add(r.keys[0], r.delta, result))) return;
      tcpstore::putI64(out, result);
      break;
    }
    case Op::kCheck:
      tcpstore::putU8(out, state.check(r.keys) ? tcpstore::kReady : tcpstore::kNotReady);
      break;
    case Op::kWait: {
      std::optional<StoreState::WaiterId> waiter;
      if (refused(state.addWaiter(r.keys, stopWaitingReply(), waiter))) return;
      replyNowOrWait(waiter);
      break;
    }
    case Op::kBarrier: {
      std::optional<StoreState::WaiterId> waiter;
      if (refused(state.barrier(r.keys[0], r.delta, stopWaitingReply(), waiter))) return;
      replyNowOrWait(waiter);
      break;
    }
    case Op::kQueuePush:
      if (refused(state.queuePush(r.keys[0], std::move(r.values[0])))) return;
      break;
    case Op::kQueuePop: {
      const std::size_t front = state.queueFrontBytes(r.keys[0]);
      if (tooLarge(8 + (front > 0 ? 8 + front : 0))) return;
      std::string value;
      const std::int64_t before = state.queuePop(r.keys[0], value);
      tcpstore::putI64(out, before);
      if (before > 0) tcpstore::putString(out, value);
      break;
    }
    case Op::kQueueLen:
      tcpstore::putI64(out, state.queueLen(r.keys[0]));
      break;
    case Op::kCancelWait:
      // Any pending wait was dropped above; if it had completed, its
      // STOP_WAITING already went out and this 01 follows it.
      tcpstore::putU8(out, tcpstore::kWaitCanceled);
      break;
    case Op::kGetNumKeys:
      tcpstore::putI64(out, state.numKeys());
      break;
    case Op::kDeleteKey:
      tcpstore::putI64(out, state.deleteKey(r.keys[0]) ? 1 : 0);
      break;
    case Op::kMultiGet: {
      std::size_t bytes = 0;
      for (const auto& key : r.keys) bytes += valueBytes(key);
      if (tooLarge(bytes)) return;
      for (const auto& key : r.keys) {
        const std::string* value = state.find(key);
        tcpstore::putString(out, value ? *value : std::string());
      }
      break;
    }
    case Op::kMultiSet:
      if (refused(state.multiSet(r.keys, r.values))) return;
      break;
    case Op::kListKeys: {
      std::vector<std::string> keys = state.keys();
      std::erase_if(keys, [](const std::string& key) { return protocol::isControlKey(key); });
      std::size_t bytes = 8;
      for (const auto& key : keys) bytes += 8 + key.size();
      if (tooLarge(bytes)) return;
      tcpstore::putI64(out, static_cast<std::int64_t>(keys.size()));
      for (const auto& key : keys) tcpstore::putString(out, key);
      break;
    }
    case Op::kWatchKey:
      closeBecause("WATCH_KEY is not supported");
      return;
  }
}

std::function<void()> TcpStoreSession::stopWaitingReply() {
  return [this] {
    wait_.reset();
    waitTimer_.reset();
    context_.syncWaiters();
    tcpstore::putU8(transport_.output(), tcpstore::kStopWaiting);
    transport_.flush();
  };
}

void TcpStoreSession::replyNowOrWait(std::optional<StoreState::WaiterId> waiter) {
  if (waiter) {
    wait_ = *waiter;
    context_.syncWaiters();
    startWaitTimer();
  } else {
    tcpstore::putU8(transport_.output(), tcpstore::kStopWaiting);
  }
}

void TcpStoreSession::startWaitTimer() {
  waitTimer_ =
      std::make_unique<asio::steady_timer>(transport_.executor(), context_.options.maxWaitTime);
  waitTimer_->async_wait(
      [self = transport_.shared_from_this(), this](boost::system::error_code ec) {
        if (ec || self->closed() || !wait_) return;
        closeBecause(fmt::format("its WAIT or BARRIER passed the server's longest wait of {} ms",
                                 context_.options.maxWaitTime.count()));
      });
}

}  // namespace ddprun::rendezvous
