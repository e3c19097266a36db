#include "ddprun/agent/workers/worker_group.h"

#include <signal.h>

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/agent/workers/error_file.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/proc_info.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::agent {

namespace {

// How long output may trail the last exit before the pipes are closed
// anyway (a process that escaped its group may still hold one).
constexpr auto kDrainLimit = std::chrono::milliseconds(500);

std::string substitutePrefix(std::string text, const WorkersSettings& config, int rank,
                             int localRank, int nodeRank) {
  const std::pair<const char*, std::string> vars[] = {
      {"${rank}", std::to_string(rank)}, {"${local_rank}", std::to_string(localRank)},
      {"${role_name}", config.role},     {"${node_rank}", std::to_string(nodeRank)},
      {"${hostname}", config.hostname},
  };
  for (const auto& [name, value] : vars) text = replaceAll(std::move(text), name, value);
  return text;
}

}  // namespace

WorkerGroup::WorkerGroup(boost::asio::io_context& io, const Shared& shared, int runIndex,
                         int restartCount, std::map<std::string, std::string> env,
                         IdentityFn identity, DoneFn onDone)
    : io_(io),
      shared_(shared),
      env_(std::move(env)),
      runIndex_(runIndex),
      restartCount_(restartCount),
      identity_(std::move(identity)),
      onDone_(std::move(onDone)),
      graceTimer_(io),
      drainTimer_(io) {}

WorkerGroup::~WorkerGroup() {
  // Every exit path of the agent ends here: nothing may survive the group.
  for (Slot& slot : slots_) {
    if (!slot.process) continue;
    slot.process->signalGroup(SIGKILL);
    shared_.guard.unwatch(slot.process->pid());
  }
}

void WorkerGroup::start() {
  cgroup_ = shared_.guard.beginGroup();
  shared_.router.reset(shared_.config.nprocPerNode);
  slots_.resize(static_cast<std::size_t>(shared_.config.nprocPerNode));
  for (int localRank = 0; localRank < shared_.config.nprocPerNode; ++localRank) {
    slots_[static_cast<std::size_t>(localRank)].localRank = localRank;
  }
  try {
    const auto dir = shared_.runDir.attemptDir(runIndex_);
    shared_.router.setDuplicateFilter(Stream::kStdout, shared_.config.duplicateStdoutFilters,
                                      dir / "filtered_stdout.log");
    shared_.router.setDuplicateFilter(Stream::kStderr, shared_.config.duplicateStderrFilters,
                                      dir / "filtered_stderr.log");
  } catch (const std::exception& e) {
    Slot& first = slots_.front();
    WorkerError error;
    error.message = e.what();
    auto failure = failureOf(first, ExitStatus{127, 0, false});
    failure.error = error;
    DDPRUN_ERROR("Attempt {} could not start: {}", runIndex_, e.what());
    outcome_.rootCause = failure;
    stopSurvivors();
    return;
  }
  for (Slot& slot : slots_) {
    if (stopping_) break;  // an earlier worker could not start
    spawn(slot);
  }
  DDPRUN_DEBUG("Attempt {} started {} workers.", runIndex_, live_);
}

void WorkerGroup::spawn(Slot& slot) {
  try {
    startProcess(slot);
  } catch (const std::exception& e) {
    // Nothing may escape: a worker that cannot start is this attempt's
    // failure, and the others are stopped cleanly.
    WorkerError error;
    error.message = e.what();
    slot.exited = true;
    auto failure = failureOf(slot, ExitStatus{127, 0, false});
    failure.error = error;
    DDPRUN_ERROR("Worker rank {} could not be started: {}", slot.rank, e.what());
    outcome_.rootCause = failure;
    stopSurvivors();
  }
}

void WorkerGroup::startProcess(Slot& slot) {
  const int localRank = slot.localRank;
  const auto dir = shared_.runDir.workerDir(runIndex_, localRank);
  slot.errorFile = dir / "error.json";
  WorkerIdentity id = identity_(localRank, slot.errorFile.string());
  slot.rank = id.rank;
  slot.groupRank = id.groupRank;

  const std::string prefix = substitutePrefix(shared_.config.logPrefixTemplate, shared_.config,
                                              id.rank, localRank, id.groupRank);
  const bool shown =
      !shared_.config.localRanksFilter || shared_.config.localRanksFilter->contains(localRank);
  for (Stream stream : {Stream::kStdout, Stream::kStderr}) {
    const Streams which = stream == Stream::kStdout ? Streams::kOut : Streams::kErr;
    const bool redirected = includes(shared_.config.redirects.forRank(localRank), which);
    const bool teed = includes(shared_.config.tee.forRank(localRank), which);
    StreamRoute route;
    route.console = shown && (!redirected || teed);
    route.filtered = shown && teed;
    if (redirected || teed)
      route.file = dir / (stream == Stream::kStdout ? "stdout.log" : "stderr.log");
    shared_.router.setRoute(localRank, stream, route, prefix);
  }

  const auto argv = substituteLocalRank(shared_.config.command, localRank);
  CpuPlacement placement = shared_.placements.empty()
                               ? CpuPlacement{}
                               : shared_.placements.at(static_cast<std::size_t>(localRank));
  placement.cgroup = cgroup_;
  SpawnOptions options;
  options.forker = shared_.forker;
  options.stdoutTerminal = shared_.router.workerTerminal(localRank, Stream::kStdout);
  options.stderrTerminal = shared_.router.workerTerminal(localRank, Stream::kStderr);
  slot.process = std::make_unique<WorkerProcess>(
      io_, argv, buildWorkerEnv(env_, shared_.config, id), placement, options);
  shared_.guard.watch(slot.process->pid());
  if (!placement.cgroup.empty()) shared_.guard.confirmCgroup(slot.process->pid());
  slot.exited = false;
  ++live_;
  for (Stream stream : {Stream::kStdout, Stream::kStderr}) {
    auto& pipe =
        stream == Stream::kStdout ? slot.process->stdoutPipe() : slot.process->stderrPipe();
    auto pump =
        std::make_shared<LogPump>(std::move(pipe), shared_.router, localRank, stream, [this] {
          --openPumps_;
          maybeFinish();
        });
    ++openPumps_;
    pumps_.push_back(pump);
    pump->start();
  }
  slot.process->waitForExit([this, localRank](ExitStatus status) { onExit(localRank, status); });
  recordEvent(slot, "START");
}

void WorkerGroup::resizeTerminals() {
  shared_.router.refreshTerminalSize();
  bool resized = false;
  for (auto& pump : pumps_) resized = pump->resizeTerminal() || resized;
  if (!resized) return;
  // Their terminals are no controlling terminals: tell the workers
  // themselves, as the kernel tells a terminal's foreground group.
  for (Slot& slot : slots_) {
    if (slot.process && !slot.exited) slot.process->signalGroup(SIGWINCH);
  }
}

void WorkerGroup::recordEvent(const Slot& slot, const std::string& state,
                              const std::string& rawError) {
  if (!shared_.onEvent) return;
  WorkerEvent event;
  event.state = state;
  event.rank = slot.rank;
  event.groupRank = slot.groupRank;
  event.localRank = slot.localRank;
  event.pid = slot.process ? slot.process->pid() : 0;
  if (state != "START") event.exitCode = slot.status.shellCode();
  event.rawError = rawError;
  event.restartCount = restartCount_;
  shared_.onEvent(event);
}

std::optional<int> WorkerGroup::localRankOf(int pid) const {
  // Up the parent chain (bounded) until a worker's pid.
  for (int hop = 0; hop < 32 && pid > 1; ++hop) {
    for (const auto& slot : slots_) {
      if (!slot.exited && slot.process && slot.process->pid() == pid) return slot.localRank;
    }
    const auto stat = readProcStat(pid);
    if (!stat) return std::nullopt;
    pid = stat->parent;
  }
  return std::nullopt;
}

void WorkerGroup::noteCause(int localRank, std::string cause, std::vector<std::string> details) {
  for (auto& slot : slots_) {
    if (slot.localRank != localRank) continue;
    slot.cause = std::move(cause);
    slot.causeDetails = std::move(details);
  }
}

std::vector<WatchedWorker> WorkerGroup::watchedWorkers() const {
  std::vector<WatchedWorker> workers;
  for (const auto& slot : slots_) {
    if (!slot.exited && slot.process) workers.push_back({slot.localRank, slot.process->pid()});
  }
  return workers;
}

WorkerFailure WorkerGroup::failureOf(const Slot& slot, ExitStatus status) const {
  WorkerFailure f;
  f.rank = slot.rank;
  f.localRank = slot.localRank;
  f.nodeRank = slot.groupRank;
  f.host = shared_.config.hostname;
  f.pid = slot.process ? slot.process->pid() : 0;
  f.attempt = restartCount_;
  f.status = status;
  f.time = std::chrono::system_clock::now();
  f.errorFile = slot.errorFile;
  f.cause = slot.cause;
  f.causeDetails = slot.causeDetails;
  return f;
}

void WorkerGroup::onExit(int localRank, ExitStatus status) {
  Slot& slot = slots_.at(static_cast<std::size_t>(localRank));
  slot.exited = true;
  slot.status = status;
  --live_;
  recordEvent(slot,
              slot.stoppedByAgent ? "TERMINATED"
              : status.success()  ? "SUCCEEDED"
                                  : "FAILED",
              status.success() ? "" : fmt::format("exit status {}", status.shellCode()));
  if (!status.success()) {
    WorkerFailure failure = failureOf(slot, status);
    if (!stopping_) {
      DDPRUN_ERROR("{}.", describeExit(failure));
      outcome_.rootCause = failure;
      stopSurvivors();
    } else if (slot.stoppedByAgent) {
      outcome_.stoppedRanks.push_back(slot.rank);
    } else {
      outcome_.otherFailures.push_back(failure);
    }
  } else if (slot.stoppedByAgent) {
    outcome_.stoppedRanks.push_back(slot.rank);
  }
  maybeFinish();
}

void WorkerGroup::stopSurvivors() {
  stop(SIGTERM, std::min(shared_.config.survivorGrace, shared_.config.shutdownTimeout));
}

void WorkerGroup::stop(int sig, std::chrono::milliseconds grace) {
  const bool allExited = std::all_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
    return slot.process != nullptr && slot.exited;
  });
  if (!slots_.empty() && allExited) {
    // Every worker started and has exited (their output may still be
    // draining): the outcome is how they exited, not a stop asked for
    // afterwards.
    return;
  }
  if (stopping_) {
    // Asked again: SIGKILL ends the grace period; another signal has been
    // sent already.
    if (sig == SIGKILL) {
      for (Slot& slot : slots_) {
        if (!slot.exited) slot.process->signalGroup(SIGKILL);
      }
    }
    return;
  }
  stopping_ = true;
  for (Slot& slot : slots_) {
    if (slot.exited) continue;
    slot.stoppedByAgent = true;
    slot.process->signalGroup(sig);
  }
  if (live_ > 0) {
    DDPRUN_DEBUG("Sent {} to {} workers; SIGKILL follows in {} ms.", signalName(sig), live_,
                 grace.count());
  }
  graceTimer_.expires_after(grace);
  graceTimer_.async_wait([this, grace](boost::system::error_code ec) {
    if (ec) return;
    for (Slot& slot : slots_) {
      if (slot.exited) continue;
      if (grace < shared_.config.shutdownTimeout) {
        DDPRUN_INFO(
            "Worker rank {} (pid {}) outlived the survivors' grace of {} ms; sending "
            "SIGKILL.",
            slot.rank, slot.process->pid(), grace.count());
      } else {
        DDPRUN_WARN("Worker rank {} (pid {}) did not exit within {} ms; sending SIGKILL.",
                    slot.rank, slot.process->pid(), grace.count());
      }
      slot.process->signalGroup(SIGKILL);
    }
  });
  maybeFinish();
}

void WorkerGroup::maybeFinish() {
  if (finished_ || live_ > 0) return;
  bool allStarted = true;
  for (const Slot& slot : slots_) allStarted = allStarted && (slot.process || stopping_);
  if (!allStarted) return;
  graceTimer_.cancel();
  if (!leftoversKilled_) {
    // Whatever the workers started and left behind goes with them, even
    // outside their process groups (a double-forked daemon).
    leftoversKilled_ = true;
    std::set<pid_t> workerGroups;
    for (const Slot& slot : slots_) {
      if (slot.process) workerGroups.insert(slot.process->pid());
    }
    const auto leftovers = shared_.guard.killLeftovers(workerGroups);
    if (!leftovers.empty()) {
      std::string list;
      for (const auto& p : leftovers) {
        list += fmt::format("{}pid {} ({})", list.empty() ? "" : ", ", p.pid, p.name);
      }
      DDPRUN_WARN("ddprun killed {} process{} the workers left running: {}.", leftovers.size(),
                  leftovers.size() == 1 ? "" : "es", list);
    }
  }
  if (openPumps_ > 0) {
    // Every worker is gone: kill what is left in their process groups so
    // the pipes reach end of file, and bound the wait for them anyway.
    for (Slot& slot : slots_) {
      if (slot.process) slot.process->signalGroup(SIGKILL);
    }
    armDrainTimer(shared_.router.consoleWritten());
    return;
  }
  finish();
}

void WorkerGroup::armDrainTimer(std::uint64_t consoleWritten) {
  drainTimer_.expires_after(kDrainLimit);
  drainTimer_.async_wait([this, consoleWritten](boost::system::error_code ec) {
    if (ec) return;
    // Pumps paused for a console that is still writing get more time; a
    // console that made no progress for kDrainLimit does not hold the exit.
    const std::uint64_t now = shared_.router.consoleWritten();
    if (shared_.router.consoleFull() && now != consoleWritten) {
      armDrainTimer(now);
      return;
    }
    // A copy: closing the last open pump finishes the group, which clears
    // pumps_ (and with it pumps that already ended) mid-loop.
    const auto pumps = pumps_;
    for (const auto& pump : pumps) pump->close();
  });
}

void WorkerGroup::finish() {
  finished_ = true;
  drainTimer_.cancel();
  for (Slot& slot : slots_) {
    if (!slot.process) continue;
    slot.process->signalGroup(SIGKILL);  // stragglers left in the group
    shared_.guard.unwatch(slot.process->pid());
  }
  pumps_.clear();
  outcome_.succeeded = !stopping_ && !outcome_.rootCause;
  std::sort(outcome_.stoppedRanks.begin(), outcome_.stoppedRanks.end());
  if (outcome_.rootCause) {
    WorkerFailure& root = *outcome_.rootCause;
    if (!root.error) root.error = readErrorFile(root.errorFile);
    const auto& tail = shared_.router.stderrTail(root.localRank);
    root.stderrTail.assign(tail.begin(), tail.end());
  }
  // The callback may destroy this group: hand it over from a fresh handler.
  boost::asio::post(io_, [onDone = onDone_, outcome = std::move(outcome_)]() mutable {
    onDone(std::move(outcome));
  });
}

}  // namespace ddprun::agent
