#include "upstream.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <random>

#include <fmt/format.h>

#include "ddprun/common/logging.h"
#include "ddprun/rendezvous/reply_reader.h"

namespace ddprun::rendezvous::relay {

namespace asio = boost::asio;
namespace protocol = rendezvous::protocol;
using asio::ip::tcp;

Upstream::Upstream(asio::any_io_executor executor, Options options,
                   std::function<void(const std::string&)> onLost)
    : socket_(executor),
      resolver_(executor),
      retryTimer_(executor),
      options_(std::move(options)),
      onLost_(std::move(onLost)) {
  hello_ = std::string(protocol::kPreamble);
  helloId_ = nextId_++;
  protocol::Hello hello;
  hello.token = options_.token;
  hello.clientName = options_.name;
  protocol::encodeRequest(hello_, helloId_, hello);
}

void Upstream::start(std::function<void()> onReady) {
  onReady_ = std::move(onReady);
  connectDeadline_ = std::chrono::steady_clock::now() + options_.connectTimeout;
  if (options_.connectSpread.count() <= 0) return connect();
  std::mt19937_64 random{jitterSeed()};
  retryTimer_.expires_after(std::chrono::microseconds(static_cast<std::int64_t>(
      random() % static_cast<std::uint64_t>(options_.connectSpread.count()))));
  retryTimer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->lost_) self->connect();
  });
}

void Upstream::connect() {
  const std::uint64_t generation = ++generation_;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options_.host, ec);
  if (ec) {
    // A name (a Kubernetes pod's, a Slurm node's): resolved on every try.
    resolver_.async_resolve(
        options_.host, std::to_string(options_.port),
        [self = shared_from_this(), generation](boost::system::error_code error,
                                                tcp::resolver::results_type endpoints) {
          if (self->lost_ || generation != self->generation_) return;
          if (error) {
            self->retryConnect(
                fmt::format("cannot resolve '{}': {}", self->options_.host, error.message()));
            return;
          }
          asio::async_connect(
              self->socket_, endpoints,
              [self, generation](boost::system::error_code connected, const tcp::endpoint&) {
                self->connected(generation, connected);
              });
        });
    return;
  }
  if (!options_.sourceHost.empty()) {
    const auto source = asio::ip::make_address(options_.sourceHost, ec);
    if (!ec) socket_.open(source.is_v4() ? tcp::v4() : tcp::v6(), ec);
    if (!ec) socket_.bind(tcp::endpoint(source, 0), ec);
    if (ec) {
      fail(fmt::format("the relay cannot connect from {}: {}", options_.sourceHost, ec.message()));
      return;
    }
  }
  socket_.async_connect(tcp::endpoint(address, options_.port),
                        [self = shared_from_this(), generation](boost::system::error_code error) {
                          self->connected(generation, error);
                        });
}

void Upstream::connected(std::uint64_t generation, const boost::system::error_code& error) {
  if (lost_ || generation != generation_) return;
  if (error) {
    retryConnect(error.message());
    return;
  }
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  connected_ = true;
  // The HELLO alone; requests follow its answer.
  writing_ = hello_;
  asio::async_write(
      socket_, asio::buffer(writing_),
      [self = shared_from_this(), generation](boost::system::error_code written, std::size_t) {
        if (self->lost_ || generation != self->generation_) return;
        self->writing_.clear();
        if (written) {
          self->broken(written.message());
          return;
        }
        self->flush();
      });
  readLoop();
}

void Upstream::retryConnect(const std::string& why) {
  if (std::chrono::steady_clock::now() >= connectDeadline_) {
    fail(
        fmt::format("cannot connect to the store at {}:{}: {}", options_.host, options_.port, why));
    return;
  }
  boost::system::error_code ignored;
  socket_.close(ignored);
  ++generation_;  // what the old socket still completes is ignored
  retryTimer_.expires_after(std::min<std::chrono::steady_clock::duration>(
      backoff_.next(), connectDeadline_ - std::chrono::steady_clock::now()));
  retryTimer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->lost_) self->connect();
  });
}

void Upstream::broken(const std::string& why) {
  if (lost_) return;
  if (ready_) {
    fail(why);
    return;
  }
  connected_ = false;
  writing_.clear();
  input_.consume(input_.readable().size());
  retryConnect(why);
}

std::uint32_t Upstream::send(const protocol::Request& request, Handler handler) {
  std::uint32_t id = nextId_++;
  if (id == 0) id = nextId_++;  // 0 is the store's pushes
  ++sequence_;
  if (lost_) {
    // Answered on the loop, never inside the caller's own call.
    asio::post(socket_.get_executor(), [handler = std::move(handler)] {
      UpstreamReply reply;
      reply.lost = true;
      reply.message = "the connection to the store is lost";
      handler(reply);
    });
    return id;
  }
  pending_.emplace(id, std::move(handler));
  protocol::encodeRequest(output_, id, request);
  flush();
  return id;
}

void Upstream::cancel(std::uint32_t id, std::function<void(bool)> done) {
  auto it = pending_.find(id);
  if (it == pending_.end() || lost_) {
    if (done) asio::post(socket_.get_executor(), [done = std::move(done)] { done(false); });
    return;
  }
  it->second = nullptr;  // its reply, if it crosses the CANCEL, is dropped
  send(protocol::Cancel{id},
       [self = shared_from_this(), id, done = std::move(done)](const UpstreamReply& reply) {
         protocol::FlagReply flag;
         const bool dropped = reply.ok() && protocol::decodeReply(reply.body, flag) && flag.value;
         if (dropped) self->pending_.erase(id);
         if (done) done(dropped);
       });
}

void Upstream::flush() {
  if (!ready_ || lost_ || !writing_.empty() || output_.empty()) return;
  writing_.swap(output_);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (self->lost_) return;
                      if (ec) {
                        self->fail(fmt::format("writing to the store failed: {}", ec.message()));
                        return;
                      }
                      self->writing_.clear();
                      self->flush();
                    });
}

void Upstream::readLoop() {
  std::size_t space = 0;
  char* into = input_.writable(0, space);
  socket_.async_read_some(
      asio::buffer(into, space), [self = shared_from_this(), generation = generation_](
                                     boost::system::error_code ec, std::size_t n) {
        if (self->lost_ || generation != self->generation_) return;
        if (ec) {
          self->broken(ec == asio::error::eof
                           ? "the store closed the connection"
                           : fmt::format("reading from the store failed: {}", ec.message()));
          return;
        }
        self->input_.commit(n);
        const auto tooLarge = rendezvous::readReplies(
            self->input_, self->options_.maxFrameBytes, [&self, generation](ReceivedFrame& frame) {
              self->handleFrame(frame);
              return !self->lost_ && generation == self->generation_;  // else: lost, or anew
            });
        if (tooLarge) return self->fail(*tooLarge);
        if (self->lost_ || generation != self->generation_) return;
        self->readLoop();
      });
}

void Upstream::handleFrame(ReceivedFrame& frame) {
  using Kind = ReceivedFrame::Kind;
  // Events are for agents' rendezvous connections, never this one.
  if (frame.kind == Kind::kEvent) return;
  if (frame.kind == Kind::kGoodbye && ready_ && pending_.empty()) {
    // Idle for the store's idle limit (the workers train and ask
    // nothing): nothing is lost by connecting again, as any client does.
    DDPRUN_DEBUG("The node relay connects to the store again: {}.", printable(frame.error.message));
    ready_ = false;
    connectDeadline_ = std::chrono::steady_clock::now() + options_.connectTimeout;
    broken("idle");
    return;
  }
  if (frame.kind != Kind::kReply) {
    // A goodbye with requests pending (the store stops), or a refusal of
    // the handshake (the token, the version): trying again would be
    // refused again.
    fail(frame.kind == Kind::kGoodbye
             ? fmt::format("the store closed the connection: {}", printable(frame.error.message))
             : fmt::format("the store refused the relay: {}", printable(frame.error.message)));
    return;
  }
  UpstreamReply reply;
  reply.status = frame.status;
  reply.body = frame.body;
  reply.message = std::move(frame.error.message);
  if (frame.requestId == helloId_) {
    if (!reply.ok()) {
      fail(fmt::format("the store refused the relay: {}", printable(reply.message)));
      return;
    }
    ready_ = true;
    flush();
    if (onReady_) {
      auto ready = std::move(onReady_);
      onReady_ = nullptr;
      ready();
    }
    return;
  }
  auto it = pending_.find(frame.requestId);
  if (it == pending_.end()) return;
  Handler handler = std::move(it->second);
  pending_.erase(it);
  if (handler) handler(reply);
}

void Upstream::close(const std::string& reason) {
  if (lost_) return;
  lost_ = true;
  boost::system::error_code ignored;
  retryTimer_.cancel();
  resolver_.cancel();
  socket_.close(ignored);
  auto pending = std::move(pending_);
  pending_.clear();
  UpstreamReply reply;
  reply.lost = true;
  reply.message = reason;
  for (auto& [id, handler] : pending) {
    if (handler) handler(reply);
  }
}

void Upstream::fail(const std::string& reason) {
  if (lost_) return;
  DDPRUN_WARN("The node relay lost the store: {}.", reason);
  close(reason);
  if (onLost_) onLost_(reason);
}

}  // namespace ddprun::rendezvous::relay
