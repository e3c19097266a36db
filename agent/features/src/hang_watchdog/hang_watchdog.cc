#include "ddprun/agent/features/hang_watchdog/hang_watchdog.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "ddprun/agent/features/parts/python_stack.h"
#include "ddprun/agent/features/parts/sampling_period.h"
#include "ddprun/common/proc_info.h"

namespace ddprun::agent {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

HangWatchdog::HangWatchdog(asio::io_context& io, std::chrono::milliseconds timeout,
                           WorkersFn workers, HangFn onHang)
    : timeout_(timeout),
      period_(samplingPeriod(timeout)),
      workers_(std::move(workers)),
      onHang_(std::move(onHang)),
      timer_(io) {
  const auto ticksPerSecond = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // At least 3 ticks: utime and stime are truncated to ticks separately, so
  // their sum can jump by 2 when a sleeping worker's housekeeping threads
  // used well under one tick (seen: a rank in time.sleep blamed wrongly).
  minTicks_ = std::max<std::uint64_t>(
      3, static_cast<std::uint64_t>(0.02 * ticksPerSecond *
                                    std::chrono::duration<double>(period_).count()));
  arm();
}

HangWatchdog::~HangWatchdog() { *alive_ = false; }

void HangWatchdog::arm() {
  timer_.expires_after(period_);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive || fired_) return;
    sample();
    if (!fired_) arm();
  });
}

std::map<pid_t, HangWatchdog::Counters> HangWatchdog::countersByGroup(
    const std::vector<WatchedWorker>& workers) const {
  std::map<pid_t, Counters> counters;
  for (const auto& w : workers) counters[w.pid] = {};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = std::stoi(name);
    const auto stat = readProcStat(pid);
    if (!stat) continue;
    const auto it = counters.find(stat->processGroup);
    if (it == counters.end()) continue;
    it->second.cpuTicks += stat->cpuTicks;
    it->second.ioBytes += readProcIoBytes(pid);
  }
  return counters;
}

void HangWatchdog::sample() {
  const auto workers = workers_();
  if (workers.empty()) return;
  const auto now = Clock::now();
  const auto counters = countersByGroup(workers);
  // A worker that exited since the last sample is progress too (the one
  // that finishes first must not leave the others looking hung).
  if (lastNodeProgress_ == Clock::time_point{} || workers.size() < progress_.size()) {
    lastNodeProgress_ = now;
  }
  std::map<pid_t, Progress> next;
  for (const auto& w : workers) {
    const Counters& c = counters.at(w.pid);
    const auto known = progress_.find(w.pid);
    if (known == progress_.end()) {
      next[w.pid] = Progress{c, now, now};  // new: counts as progress
      continue;
    }
    Progress p = known->second;
    // Counters of a process group can fall (a child exited): any change
    // beyond the thresholds, either way, is activity.
    const auto cpuDelta = c.cpuTicks > p.last.cpuTicks ? c.cpuTicks - p.last.cpuTicks : 0;
    if (cpuDelta >= minTicks_) p.lastCpuProgress = now;
    if (cpuDelta >= minTicks_ || c.ioBytes > p.last.ioBytes) {
      p.lastProgress = now;
      lastNodeProgress_ = now;
    }
    p.last = c;
    next[w.pid] = p;
  }
  progress_ = std::move(next);

  // Hung: the node made no progress for the timeout.
  if (now - lastNodeProgress_ < timeout_) return;
  // A worker stopped by a signal (state T: SIGSTOP, a debugger) is the
  // cause: every collective waits for it, and the ranks that block in one
  // soon after it stopped can look as early at the sampling's resolution.
  std::vector<WorkerStall> stalls;
  for (const auto& w : workers) {
    const auto stat = readProcStat(w.pid);
    const Progress& p = progress_.at(w.pid);
    stalls.push_back({w.localRank, stat && (stat->state == 'T' || stat->state == 't'),
                      p.lastProgress, p.lastCpuProgress});
  }
  const HungWorkerChoice choice = chooseHungWorker(stalls);
  const WatchedWorker* first = &workers[choice.index];
  fired_ = true;
  HangReport report;
  report.localRank = first->localRank;
  report.pid = first->pid;
  report.stoppedBySignal = stalls[choice.index].stoppedBySignal;
  report.quietSeconds = std::chrono::duration<double>(now - lastNodeProgress_).count();
  report.stalledSeconds =
      std::chrono::duration<double>(now - stalls[choice.index].lastProgress).count();
  report.aheadSeconds = choice.aheadSeconds;
  report.cpuAheadSeconds = choice.cpuAheadSeconds;
  report.details = describeStuckProcess(first->pid);
  for (const auto& w : workers) {
    if (&w == first) continue;
    report.peers.push_back(
        {w.localRank, std::chrono::duration<double>(now - progress_.at(w.pid).lastProgress).count(),
         describeWait(w.pid)});
  }
  onHang_(report);
}

HungWorkerChoice chooseHungWorker(const std::vector<WorkerStall>& workers) {
  const bool anyStopped = std::any_of(workers.begin(), workers.end(),
                                      [](const WorkerStall& w) { return w.stoppedBySignal; });
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (!anyStopped || workers[i].stoppedBySignal) candidates.push_back(i);
  }
  const auto key = [&](std::size_t i) {
    return std::tuple(workers[i].lastProgress, workers[i].lastCpuProgress, workers[i].localRank);
  };
  std::sort(candidates.begin(), candidates.end(),
            [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  HungWorkerChoice choice;
  choice.index = candidates.front();
  if (anyStopped || candidates.size() < 2) return choice;
  const WorkerStall& first = workers[candidates[0]];
  const WorkerStall& next = workers[candidates[1]];
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  choice.aheadSeconds = seconds(next.lastProgress - first.lastProgress);
  if (choice.aheadSeconds == 0) {
    choice.cpuAheadSeconds = seconds(next.lastCpuProgress - first.lastCpuProgress);
  }
  return choice;
}

namespace {

std::string stateLine(pid_t pid) {
  const auto stat = readProcStat(pid);
  if (!stat) return {};
  const char* meaning = stat->state == 'R'   ? "running"
                        : stat->state == 'S' ? "sleeping"
                        : stat->state == 'D' ? "uninterruptible sleep (in the kernel)"
                        : stat->state == 'T' ? "stopped"
                        : stat->state == 'Z' ? "zombie"
                                             : "other";
  return fmt::format("state {} ({})", stat->state, meaning);
}

std::string wchanLine(pid_t pid) {
  const std::string wchan = readProcLine(pid, "wchan");
  return wchan.empty() || wchan == "0" ? std::string() : "waiting in " + wchan;
}

}  // namespace

std::string describeWait(pid_t pid) {
  std::string line = stateLine(pid);
  const std::string wchan = wchanLine(pid);
  if (!line.empty() && !wchan.empty()) line += ", ";
  return line + wchan;
}

std::vector<std::string> describeStuckProcess(pid_t pid) {
  std::vector<std::string> lines;
  if (std::string state = stateLine(pid); !state.empty()) lines.push_back(std::move(state));
  if (std::string wchan = wchanLine(pid); !wchan.empty()) lines.push_back(std::move(wchan));
  std::ifstream stack("/proc/" + std::to_string(pid) + "/stack");  // root only
  std::string frame;
  int frames = 0;
  while (std::getline(stack, frame) && frames < 12) {
    lines.push_back("kernel: " + frame);
    ++frames;
  }
  // The Python stack (py-spy; bounded to 10 s), or how to get it.
  for (std::string& line : pythonStack(pid)) lines.push_back(std::move(line));
  return lines;
}

}  // namespace ddprun::agent
