#include "log_pump.h"

namespace ddprun::agent {

namespace {
constexpr std::size_t kMaxLine = 64 * 1024;
}

LogPump::LogPump(boost::asio::readable_pipe pipe, OutputRouter& router, int localRank,
                 Stream stream, std::function<void()> onEnd)
    : pipe_(std::move(pipe)),
      router_(router),
      localRank_(localRank),
      stream_(stream),
      onEnd_(std::move(onEnd)) {}

void LogPump::start() { readMore(); }

void LogPump::readMore() {
  pipe_.async_read_some(boost::asio::buffer(chunk_),
                        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                          if (self->ended_) return;
                          if (n > 0) self->consume(n);
                          if (ec) {
                            self->end();
                            return;
                          }
                          if (self->router_.consoleFull()) {
                            // Backpressure: read again once the console drained.
                            self->router_.whenConsoleHasRoom([self] {
                              if (!self->ended_) self->readMore();
                            });
                            return;
                          }
                          self->readMore();
                        });
}

void LogPump::consume(std::size_t n) {
  std::string_view data(chunk_, n);
  while (!data.empty()) {
    const std::size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(data);
      if (pending_.size() >= kMaxLine) flushPartial();
      return;
    }
    if (pending_.empty()) {
      router_.line(localRank_, stream_, data.substr(0, newline));
    } else {
      pending_.append(data.substr(0, newline));
      router_.line(localRank_, stream_, pending_);
      pending_.clear();
    }
    data.remove_prefix(newline + 1);
  }
}

void LogPump::flushPartial() {
  if (pending_.empty()) return;
  router_.line(localRank_, stream_, pending_);
  pending_.clear();
}

void LogPump::end() {
  if (ended_) return;
  ended_ = true;
  flushPartial();
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (onEnd_) onEnd_();
}

void LogPump::close() { end(); }

}  // namespace ddprun::agent
