#include "console_writer.h"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun::agent {

namespace {

void writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a closed console must not take the agent down
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

ConsoleWriter::ConsoleWriter(std::function<void()> onRoom)
    : onRoom_(std::move(onRoom)), thread_([this] { run(); }) {}

ConsoleWriter::~ConsoleWriter() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  wake_.notify_one();
  const bool flushed =
      idle_.wait_for(lock, kExitFlushLimit, [this] { return queue_.empty() && !writing_; });
  lock.unlock();
  if (flushed) {
    thread_.join();
  } else {
    thread_.detach();  // blocked on a console nobody reads; exit goes on
  }
}

void ConsoleWriter::write(int fd, std::string_view data) {
  std::unique_lock lock(mutex_);
  if (queue_.empty() && !writing_ && data.size() <= PIPE_BUF) {
    // Only this thread adds work, so the writer stays idle meanwhile.
    lock.unlock();
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0) {
      writeAll(fd, data);
      lock.lock();
      written_ += data.size();
      return;
    }
    lock.lock();
  }
  queuedBytes_ += data.size();
  if (queuedBytes_ >= kMaxQueuedBytes) wasFull_ = true;
  queue_.push_back({fd, std::string(data)});
  wake_.notify_one();
}

void ConsoleWriter::flush(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  idle_.wait_for(lock, limit, [this] { return queue_.empty() && !writing_; });
}

bool ConsoleWriter::full() const {
  std::lock_guard lock(mutex_);
  return queuedBytes_ >= kMaxQueuedBytes;
}

std::uint64_t ConsoleWriter::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

void ConsoleWriter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      idle_.notify_all();
      if (stopping_) return;
      continue;
    }
    Chunk chunk = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    writeAll(chunk.fd, chunk.data);
    lock.lock();
    writing_ = false;
    queuedBytes_ -= chunk.data.size();
    written_ += chunk.data.size();
    if (wasFull_ && queuedBytes_ < kMaxQueuedBytes / 2) {
      wasFull_ = false;
      if (onRoom_) onRoom_();
    }
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace ddprun::agent
