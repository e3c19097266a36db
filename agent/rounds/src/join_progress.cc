#include "ddprun/agent/rounds/join_progress.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

namespace ddprun::agent {

namespace protocol = rendezvous::protocol;

namespace {

constexpr std::chrono::seconds kTerminalInterval{1};
constexpr char kEraseLine[] = "\r\033[K";

}  // namespace

std::string formatJoinProgress(const std::optional<protocol::RendezvousStatus>& status,
                               const std::string& endpoint, std::chrono::seconds waited) {
  if (!status) {
    return fmt::format("waiting for the rendezvous store at {} ({} s)", endpoint, waited.count());
  }
  const protocol::RendezvousStatus& st = *status;
  if (!st.exists) {
    return fmt::format("waiting for nodes at {}: none joined yet ({} s)", endpoint, waited.count());
  }
  if (st.running) {
    // Full: the round runs without this node until a slot frees up.
    return fmt::format("waiting for a free slot: round {} runs with all {} nodes ({} s)", st.round,
                       st.maxNodes, waited.count());
  }
  std::string line = fmt::format("waiting for nodes: {} of {} joined", st.joined, st.maxNodes);
  if (st.minNodes != st.maxNodes) line += fmt::format(" (min {})", st.minNodes);
  if (st.lastCallMs >= 0) line += fmt::format(", last call in {} s", (st.lastCallMs + 999) / 1000);
  line += protocol::missingNodesText(st);
  line += fmt::format(" ({} s)", waited.count());
  return line;
}

bool JoinProgress::stderrIsTerminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
}

JoinProgress::JoinProgress(StatusFn status, std::string endpoint, bool terminal,
                           std::chrono::milliseconds interval)
    : status_(std::move(status)),
      endpoint_(std::move(endpoint)),
      terminal_(terminal),
      interval_(interval) {
  if (interval_.count() > 0) thread_ = std::thread([this] { run(); });
}

void JoinProgress::setDeadline(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  deadline_ = deadline;
}

JoinProgress::~JoinProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lineShown_) std::cerr << kEraseLine << std::flush;
}

void JoinProgress::run() {
  const std::chrono::steady_clock::duration interval =
      terminal_ ? std::chrono::steady_clock::duration(kTerminalInterval) : interval_;
  auto next = start_ + interval;
  std::unique_lock lock(mutex_);
  while (!stop_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    std::string line;
    try {
      line = formatJoinProgress(status_(), endpoint_,
                                std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::steady_clock::now() - start_));
    } catch (const std::exception& e) {
      line = fmt::format("waiting for the rendezvous store at {}: no answer ({})", endpoint_,
                         e.what());
    }
    lock.lock();
    if (stopping_) break;  // the round completed while asking: say nothing
    if (deadline_ && std::chrono::steady_clock::now() >= *deadline_) break;  // failing now
    if (terminal_) {
      std::cerr << kEraseLine << "ddprun: " << line << std::flush;
      lineShown_ = true;
    } else {
      std::cerr << "ddprun: " << line << "\n" << std::flush;
    }
    next += interval;
  }
}

}  // namespace ddprun::agent
