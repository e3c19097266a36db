// The root-cause report printed when a job fails.
//
// The root cause is the first failure in time: the first worker of the
// last attempt that exited unsuccessfully on its own (workers the agent
// stopped afterwards are listed separately, not blamed). The report names
// rank, local rank, host, pid, exit code or signal, time and the error
// message: from the worker's error file when it wrote one, else the last
// lines of its stderr.
//
// Thread-safety: plain values and a pure formatting function.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error_file.h"
#include "worker_process.h"

namespace ddprun::agent {

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

struct FailureSummary {
  std::string programName;
  int attempts = 0;  // attempts run
  int maxRestarts = 0;
  WorkerFailure rootCause;
  std::vector<WorkerFailure> otherFailures;  // later failures, same attempt
  std::vector<int> stoppedRanks;             // ranks the agent stopped
  FailureHistory history;                    // the earlier attempts
  std::string repeatedFailure;               // a host that failed round after round
  bool filesKept = true;                     // false: the run directory is temporary (no --log_dir)
};

// "worker rank 3 (local rank 3, pid 4121) exited with code 7"
std::string describeExit(const WorkerFailure& failure);

std::string formatFailureReport(const FailureSummary& summary);

}  // namespace ddprun::agent
