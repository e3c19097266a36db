#include "ddprun/agent/output/console_writer.h"

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

ConsoleWriter::ConsoleWriter(std::function<void()> onRoom) : state_(std::make_shared<State>()) {
  state_->onRoom = std::move(onRoom);
  thread_ = std::thread([state = state_] { run(state); });
}

ConsoleWriter::~ConsoleWriter() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  s.stopping = true;
  s.onRoom = nullptr;  // its target is going away
  s.wake.notify_one();
  const bool flushed =
      s.idle.wait_for(lock, kExitFlushLimit, [&s] { return s.queue.empty() && !s.writing; });
  if (!flushed) s.queue.clear();  // the thread ends after the write it is blocked in
  lock.unlock();
  if (flushed) {
    thread_.join();
  } else {
    thread_.detach();  // blocked on a console nobody reads; exit goes on
  }
}

void ConsoleWriter::write(int fd, std::string_view data) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.queue.empty() && !s.writing && data.size() <= PIPE_BUF) {
    // Only this thread adds work, so the writer stays idle meanwhile.
    lock.unlock();
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0) {
      writeAll(fd, data);
      lock.lock();
      s.written += data.size();
      return;
    }
    lock.lock();
  }
  s.queuedBytes += data.size();
  if (s.queuedBytes >= kMaxQueuedBytes) s.wasFull = true;
  s.queue.push_back({fd, std::string(data)});
  s.wake.notify_one();
}

void ConsoleWriter::flush(std::chrono::milliseconds limit) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  s.idle.wait_for(lock, limit, [&s] { return s.queue.empty() && !s.writing; });
}

bool ConsoleWriter::full() const {
  std::lock_guard lock(state_->mutex);
  return state_->queuedBytes >= kMaxQueuedBytes;
}

std::uint64_t ConsoleWriter::written() const {
  std::lock_guard lock(state_->mutex);
  return state_->written;
}

void ConsoleWriter::run(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock lock(s.mutex);
  for (;;) {
    s.wake.wait(lock, [&s] { return s.stopping || !s.queue.empty(); });
    if (s.queue.empty()) {
      s.idle.notify_all();
      if (s.stopping) return;
      continue;
    }
    Chunk chunk = std::move(s.queue.front());
    s.queue.pop_front();
    s.writing = true;
    lock.unlock();
    writeAll(chunk.fd, chunk.data);
    lock.lock();
    s.writing = false;
    s.queuedBytes -= chunk.data.size();
    s.written += chunk.data.size();
    if (s.wasFull && s.queuedBytes < kMaxQueuedBytes / 2) {
      s.wasFull = false;
      if (s.onRoom) s.onRoom();
    }
    if (s.queue.empty()) s.idle.notify_all();
  }
}

}  // namespace ddprun::agent
