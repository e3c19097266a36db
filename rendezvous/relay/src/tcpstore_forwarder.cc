#include "tcpstore_forwarder.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/logging.h"

namespace ddprun::rendezvous::relay {

namespace protocol = rendezvous::protocol;
namespace tcpstore = rendezvous::tcpstore;
using tcpstore::Op;

TcpStoreForwarder::TcpStoreForwarder(WorkerConnection& connection, tcpstore::Dialect dialect)
    : connection_(connection),
      context_(connection.context()),
      decoder_(dialect, tcpstore::decoderLimits(connection.context().options.limits)) {}

bool TcpStoreForwarder::wantsInput() const {
  return !awaiting_ && unacked_ <= context_.options.maxUnackedBytes;
}

void TcpStoreForwarder::refuse(const std::string& why) {
  DDPRUN_WARN("The node relay closes the TCPStore connection of {}: {}.", connection_.peer(), why);
  connection_.close(why);
}

bool TcpStoreForwarder::process() {
  while (wantsInput() && !connection_.closed()) {
    tcpstore::Request r;
    std::size_t used = 0;
    std::string error;
    auto& input = connection_.input();
    const tcpstore::Parse parse = decoder_.feed(input.readable(), used, r, error);
    input.consume(used);
    if (parse == tcpstore::Parse::kNeedMore) return true;
    if (parse == tcpstore::Parse::kError) {
      refuse(error);
      return false;
    }
    ++context_.counters.requests;
    for (const auto& key : r.keys) {
      if (!protocol::isControlKey(key)) continue;
      refuse(fmt::format("it named the control key '{}', which only ddprun's agents may use",
                         printable(key)));
      return false;
    }
    // As on the store: the client serialises its calls, so a new request
    // means a pending wait was abandoned or is being cancelled.
    dropWait();
    handle(r);
  }
  return !connection_.closed();
}

void TcpStoreForwarder::ask(const protocol::Request& request,
                            std::function<void(std::string& out, std::string_view body)> reply) {
  awaiting_ = true;
  context_.shared->forward(caller_, request,
                           [self = connection_.shared_from_this(), this,
                            reply = std::move(reply)](const UpstreamReply& answer) {
                             if (!readAnswered(answer)) return;
                             reply(self->output(), answer.body);
                             answered();
                           });
}

bool TcpStoreForwarder::readAnswered(const UpstreamReply& answer) {
  if (connection_.closed()) return false;
  if (answer.ok()) return true;
  refuse(fmt::format("the store refused it: {}", answer.message));
  return false;
}

void TcpStoreForwarder::answered() {
  awaiting_ = false;
  connection_.flush();
  connection_.resume();
}

void TcpStoreForwarder::write(const protocol::Request& request, std::size_t bytes) {
  unacked_ += bytes;
  context_.shared->forward(
      caller_, request,
      [self = connection_.shared_from_this(), this, bytes](const UpstreamReply& answer) {
        if (self->closed()) return;
        if (!answer.ok()) {
          refuse(fmt::format("a write was refused ({})", answer.message));
          return;
        }
        const bool wasFull = unacked_ > context_.options.maxUnackedBytes;
        unacked_ -= bytes;
        if (wasFull && wantsInput()) connection_.resume();
      });
}

void TcpStoreForwarder::closing() {
  dropWait();
  context_.shared->gone(caller_);
}

void TcpStoreForwarder::dropWait() {
  if (waitTicket_ == 0 && barrierId_ == 0) return;
  if (waitTicket_ != 0) context_.shared->cancelWait(waitTicket_);
  if (barrierId_ != 0) context_.shared->upstream().cancel(barrierId_);
  waitTicket_ = 0;
  barrierId_ = 0;
  --context_.counters.waiting;
}

void TcpStoreForwarder::waitEnded() {
  waitTicket_ = 0;
  barrierId_ = 0;
  --context_.counters.waiting;
}

void TcpStoreForwarder::handle(tcpstore::Request& r) {
  std::string& out = connection_.output();
  const auto value = [](std::string& o, std::string_view body) {
    protocol::ValueReply reply;
    protocol::decodeReply(body, reply);
    tcpstore::putString(o, reply.value);
  };
  const auto integer = [](std::string& o, std::string_view body) {
    protocol::IntegerReply reply;
    protocol::decodeReply(body, reply);
    tcpstore::putI64(o, reply.value);
  };
  std::size_t bytes = 0;
  for (const auto& key : r.keys) bytes += key.size() + tcpstore::kFieldOverheadBytes;
  for (const auto& v : r.values) bytes += v.size() + tcpstore::kFieldOverheadBytes;
  switch (r.op) {
    case Op::kValidate:
      ++context_.counters.answeredLocally;
      return;  // only valid first; a repeat is harmless
    case Op::kPing:
      ++context_.counters.answeredLocally;
      tcpstore::putU32(out, r.word);
      return;
    case Op::kSet:
      write(protocol::Set{std::move(r.keys[0]), std::move(r.values[0])}, bytes);
      return;
    case Op::kAppend:
      write(protocol::Append{std::move(r.keys[0]), std::move(r.values[0])}, bytes);
      return;
    case Op::kMultiSet:
      write(protocol::MultiSet{std::move(r.keys), std::move(r.values)}, bytes);
      return;
    case Op::kQueuePush:
      write(protocol::QueuePush{std::move(r.keys[0]), std::move(r.values[0])}, bytes);
      return;
    case Op::kCompareSet:
      ask(protocol::CompareSet{std::move(r.keys[0]), std::move(r.values[0]),
                               std::move(r.values[1])},
          value);
      return;
    case Op::kGet:
      awaiting_ = true;
      context_.shared->get(
          caller_, r.keys[0],
          [self = connection_.shared_from_this(), this, value](const UpstreamReply& answer) {
            if (!readAnswered(answer)) return;
            value(self->output(), answer.body);
            answered();
          });
      return;
    case Op::kAdd:
      awaiting_ = true;
      context_.shared->add(caller_, r.keys[0], r.delta,
                           [self = connection_.shared_from_this(), this](
                               const UpstreamReply& answer, std::int64_t sum) {
                             caller_.lastWrite = context_.shared->upstream().sequence();
                             if (self->closed()) return;
                             if (!answer.ok()) {
                               refuse(fmt::format("a write was refused ({})", answer.message));
                               return;
                             }
                             tcpstore::putI64(self->output(), sum);
                             answered();
                           });
      return;
    case Op::kCheck:
      ask(protocol::Check{std::move(r.keys)}, [](std::string& o, std::string_view body) {
        protocol::FlagReply reply;
        protocol::decodeReply(body, reply);
        tcpstore::putU8(o, reply.value ? tcpstore::kReady : tcpstore::kNotReady);
      });
      return;
    case Op::kWait:
      // Not awaited: the next request (CANCEL_WAIT, or any) drops it.
      ++context_.counters.waiting;
      waitTicket_ = context_.shared->wait(
          caller_, std::move(r.keys),
          [self = connection_.shared_from_this(), this](const UpstreamReply& answer) {
            waitEnded();
            if (self->closed()) return;
            if (!answer.ok()) {
              refuse(answer.lost ? answer.message
                                 : fmt::format("its WAIT ended on the store: {}", answer.message));
              return;
            }
            tcpstore::putU8(self->output(), tcpstore::kStopWaiting);
            self->flush();
          });
      return;
    case Op::kBarrier: {
      protocol::Barrier barrier{std::move(r.keys[0]), r.delta, protocol::kNoTimeout};
      ++context_.counters.waiting;
      barrierId_ = context_.shared->forward(
          caller_, barrier,
          [self = connection_.shared_from_this(), this](const UpstreamReply& answer) {
            waitEnded();
            if (self->closed()) return;
            if (!answer.ok()) {
              refuse(fmt::format("its BARRIER ended on the store: {}", answer.message));
              return;
            }
            tcpstore::putU8(self->output(), tcpstore::kStopWaiting);
            self->flush();
          });
      return;
    }
    case Op::kQueuePop:
      ask(protocol::QueuePop{std::move(r.keys[0])}, [](std::string& o, std::string_view body) {
        protocol::QueuePopReply reply;
        protocol::decodeReply(body, reply);
        tcpstore::putI64(o, reply.length);
        if (reply.length > 0) tcpstore::putString(o, reply.value);
      });
      return;
    case Op::kQueueLen:
      ask(protocol::QueueLen{std::move(r.keys[0])}, integer);
      return;
    case Op::kCancelWait:
      // The pending wait was dropped above; if it had completed, its
      // STOP_WAITING already went out and this 01 follows it.
      ++context_.counters.answeredLocally;
      tcpstore::putU8(out, tcpstore::kWaitCanceled);
      return;
    case Op::kGetNumKeys:
      ask(protocol::NumKeys{}, integer);
      return;
    case Op::kDeleteKey:
      ask(protocol::DeleteKey{std::move(r.keys[0])}, [](std::string& o, std::string_view body) {
        protocol::FlagReply reply;
        protocol::decodeReply(body, reply);
        tcpstore::putI64(o, reply.value ? 1 : 0);
      });
      return;
    case Op::kMultiGet:
      awaiting_ = true;
      context_.shared->multiGet(
          caller_, r.keys,
          [self = connection_.shared_from_this(), this](const UpstreamReply& answer) {
            if (!readAnswered(answer)) return;
            protocol::ValuesReply reply;
            protocol::decodeReply(answer.body, reply);
            for (const auto& v : reply.values) tcpstore::putString(self->output(), v);
            answered();
          });
      return;
    case Op::kListKeys:
      ask(protocol::ListKeys{}, [](std::string& o, std::string_view body) {
        protocol::ValuesReply reply;
        protocol::decodeReply(body, reply);
        std::erase_if(reply.values,
                      [](const std::string& key) { return protocol::isControlKey(key); });
        tcpstore::putI64(o, static_cast<std::int64_t>(reply.values.size()));
        for (const auto& key : reply.values) tcpstore::putString(o, key);
      });
      return;
    case Op::kWatchKey:
      refuse("WATCH_KEY is not supported");
      return;
  }
}

}  // namespace ddprun::rendezvous::relay
