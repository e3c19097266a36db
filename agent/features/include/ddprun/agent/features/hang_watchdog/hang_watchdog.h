// HangWatchdog: finds a node whose workers have all stopped making
// progress (--watchdog_timeout, docs/self-healing.md), without any change
// to the training program.
//
// What counts as progress, per worker (its whole process group, so
// DataLoader workers and other children count too, and the CPU time of
// children they reaped): CPU time (more than 2 %
// of a sampling period, at least three clock ticks, so idle housekeeping
// threads do not count) or bytes read or written (/proc/<pid>/io: through
// any descriptor — output, files, sockets, a collective moving data — and
// through the storage layer, so a worker paging in a memory-mapped dataset
// or model with little CPU is busy too). A worker blocked in a collective,
// sleeping, or stuck in uninterruptible sleep shows neither.
//
// The node is hung when none of its workers progressed (or exited) for the
// timeout: a rank that never reaches the collective its peers wait in
// stops first, and its peers stop as soon as they block in it. The root
// cause is a worker stopped by a signal (state T) if there is one, else the
// worker that stopped first (chooseHungWorker). A node where one worker still
// computes is never hung, so a rank-0 evaluation while the others wait at a barrier is safe.
//
// The counters have no change notification, so this is the one place the
// agent samples: every min(timeout / 4, 1 s), only while --watchdog_timeout
// is set. The cap is the resolution of "stopped first": peers block in the
// collective soon after the culprit stops, often within a step. One sample
// reads /proc/<pid>/stat of every process (about 9 us each).
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

// What ddprun can see of a hung worker.
struct HangReport {
  int localRank = 0;
  pid_t pid = 0;
  double quietSeconds = 0;           // since any worker of the node last progressed
  double stalledSeconds = 0;         // since this worker last progressed
  double aheadSeconds = 0;           // how much earlier it stalled than the next; -1: alone
                                     // or stopped by a signal
  bool stoppedBySignal = false;      // state T: chosen over any worker that only waits
  std::vector<std::string> details;  // state, wchan, kernel stack, Python stack
  // The node's other workers, for the log: when each stopped and where it
  // waits, so a report that blames the wrong rank still shows the truth.
  struct Peer {
    int localRank = 0;
    double stalledSeconds = 0;
    std::string where;  // "state S (sleeping), waiting in futex_do_wait"
  };
  std::vector<Peer> peers;
  // Tied with another in its last progress, but its CPU time stopped this
  // much earlier (the tie-break chose it); 0 when no tie-break decided.
  double cpuAheadSeconds = 0;
};

// What the watchdog last saw of one worker, and which of them it blames.
struct WorkerStall {
  int localRank = 0;
  bool stoppedBySignal = false;
  // The last sample in which it progressed at all (CPU or I/O), and the
  // last in which its CPU time grew.
  std::chrono::steady_clock::time_point lastProgress;
  std::chrono::steady_clock::time_point lastCpuProgress;
};
struct HungWorkerChoice {
  std::size_t index = 0;       // into the workers given
  double aheadSeconds = -1;    // before the next one's last progress; 0: tie; -1: alone or
                               // stopped by a signal
  double cpuAheadSeconds = 0;  // a tie decided by CPU: how much earlier its CPU stopped
};
// The worker to blame for a hung node: one stopped by a signal (state T) if
// any, else the one whose last progress is earliest. Workers tied at the
// sampling's resolution are told apart by their last CPU progress: a rank
// that never reaches a collective can still receive its peers' bytes (its
// communication thread reads what they send when they enter it), so its
// I/O last moves in the same sample as their CPU, while its own CPU
// stopped before. Then the lowest local rank. `workers` is not empty.
HungWorkerChoice chooseHungWorker(const std::vector<WorkerStall>& workers);

class HangWatchdog {
 public:
  using WorkersFn = std::function<std::vector<WatchedWorker>()>;
  using HangFn = std::function<void(const HangReport&)>;

  HangWatchdog(boost::asio::io_context& io, std::chrono::milliseconds timeout, WorkersFn workers,
               HangFn onHang);
  ~HangWatchdog();
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  std::chrono::milliseconds period() const { return period_; }

 private:
  struct Counters {
    std::uint64_t cpuTicks = 0;
    std::uint64_t ioBytes = 0;
  };
  struct Progress {
    Counters last;
    std::chrono::steady_clock::time_point lastProgress;
    std::chrono::steady_clock::time_point lastCpuProgress;
  };

  void arm();
  void sample();
  std::map<pid_t, Counters> countersByGroup(const std::vector<WatchedWorker>& workers) const;

  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds period_;
  std::uint64_t minTicks_;
  WorkersFn workers_;
  HangFn onHang_;
  boost::asio::steady_timer timer_;
  std::map<pid_t, Progress> progress_;  // by worker pid
  // The last sample in which any worker progressed or exited.
  std::chrono::steady_clock::time_point lastNodeProgress_;
  bool fired_ = false;
  // Cleared on destruction: a timer handler already queued when the
  // watchdog is destroyed must not touch it.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// State, wchan, kernel stack and (with py-spy on PATH) the Python stack of
// `pid`, as far as this process may read them.
std::vector<std::string> describeStuckProcess(pid_t pid);
// Its state and wchan on one line; "" when it is gone.
std::string describeWait(pid_t pid);

}  // namespace ddprun::agent
