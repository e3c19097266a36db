// The values a worker group's end is told in, shared by the lifecycle, the
// rounds, the workers and the reports without dragging processes in: how a
// worker exited (ExitStatus), what it wrote in its error file (WorkerError),
// one failed worker (WorkerFailure), a job's earlier failed attempts
// (FailureHistory), a worker to watch (WatchedWorker) and how an attempt's
// group ended (GroupOutcome).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::agent {

struct ExitStatus {
  int code = 0;    // exit code, when !signaled
  int signal = 0;  // terminating signal, when signaled
  bool signaled = false;

  bool success() const { return !signaled && code == 0; }
  // The shell convention: the code, or 128 + the signal number.
  int shellCode() const { return signaled ? 128 + signal : code; }
  static ExitStatus fromWaitStatus(int status);
};

// What a worker wrote in its error file (error_file.h reads it).
struct WorkerError {
  std::string message;
  std::string traceback;       // py_callstack, when present
  std::int64_t timestamp = 0;  // seconds since the epoch, 0 if absent
};

struct WorkerFailure {
  int rank = 0;
  int localRank = 0;
  int nodeRank = 0;
  std::string host;
  int pid = 0;
  int attempt = 0;  // the restart count of its attempt (TORCHELASTIC_RESTART_COUNT)
  ExitStatus status;
  std::chrono::system_clock::time_point time;
  std::filesystem::path errorFile;      // where the worker could write one
  std::optional<WorkerError> error;     // what it wrote, if anything
  std::vector<std::string> stderrTail;  // its last stderr lines
  std::string cause;  // why ddprun killed it (an expired timer, a hang), if it did
  std::vector<std::string> causeDetails;  // what ddprun saw of it then
};

// "worker rank 3 (local rank 3, pid 4121) exited with code 7"
std::string describeExit(const WorkerFailure& failure);

// What the worker said as it failed: its error file's message and
// traceback, then its last stderr lines.
std::string failureText(const WorkerFailure& failure);

// Whether the worker failed because a peer went away: it exited (not by a
// signal, not stopped by ddprun) saying a connection of its collectives or
// store closed (Gloo's "Connection closed by peer", a reset, a broken pipe,
// NCCL's remote error or abort). Such a failure is the knock-on of another
// node's, so the job never blames this node's host for it.
bool lostAPeer(const WorkerFailure& failure);

// The earlier failed attempts of a job, bounded however many there were:
// the first and the last, and how often each cause (rank and exit) came.
class FailureHistory {
 public:
  void add(int attempt, const WorkerFailure& rootCause);
  bool empty() const { return count_ == 0; }
  int count() const { return count_; }
  // Report lines: every attempt up to three, else first, last and counts.
  std::vector<std::string> lines() const;

 private:
  static constexpr std::size_t kMaxCauses = 8;  // distinct causes listed
  int count_ = 0;
  std::vector<std::string> firstLines_;  // at most three
  std::string last_;
  std::vector<std::pair<std::string, int>> causes_;  // in first-seen order
  int otherCauses_ = 0;
};

// A running worker, for the watchers (hang watchdog, D-state watch).
struct WatchedWorker {
  int localRank = 0;
  pid_t pid = 0;  // also its process group
};

// How one attempt's worker group ended, as the group reports it once every
// worker has been reaped and its output drained.
struct GroupOutcome {
  bool succeeded = false;
  std::optional<WorkerFailure> rootCause;
  std::vector<WorkerFailure> otherFailures;
  std::vector<int> stoppedRanks;  // ranks the group stopped (not failures)
};

}  // namespace ddprun::agent
