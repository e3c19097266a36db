#include "ddprun/agent/output/log_pump.h"

#include "ddprun/agent/output/worker_terminal.h"

namespace ddprun::agent {

LogPump::LogPump(boost::asio::readable_pipe pipe, OutputRouter& router, int localRank,
                 Stream stream, std::function<void()> onEnd)
    : pipe_(std::move(pipe)),
      router_(router),
      localRank_(localRank),
      stream_(stream),
      onEnd_(std::move(onEnd)) {}

void LogPump::start() { readMore(); }

void LogPump::readMore() {
  pipe_.async_read_some(
      boost::asio::buffer(chunk_),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (self->ended_) return;
        if (n > 0) self->router_.write(self->localRank_, self->stream_, {self->chunk_, n});
        if (ec) {
          self->end();  // end of file, or EIO: the terminal's last writer closed it
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

bool LogPump::resizeTerminal() {
  if (ended_ || !pipe_.is_open()) return false;
  const auto size = router_.workerTerminal(localRank_, stream_);
  return size && resizeWorkerTerminal(pipe_.native_handle(), *size);
}

void LogPump::end() {
  if (ended_) return;
  ended_ = true;
  router_.end(localRank_, stream_);
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (onEnd_) onEnd_();
}

void LogPump::close() { end(); }

}  // namespace ddprun::agent
