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

#include "ddprun/agent/core/outcome.h"

namespace ddprun::agent {

struct FailureSummary {
  std::string programName;
  int attempts = 0;  // attempts run
  int maxRestarts = 0;
  WorkerFailure rootCause;
  std::vector<WorkerFailure> otherFailures;  // later failures, same attempt
  std::vector<int> stoppedRanks;             // ranks the agent stopped
  FailureHistory history;                    // the earlier attempts
  std::string repeatedFailure;               // a host that failed round after round
  // Whether the attempt had made progress (a rank's first step) before it
  // failed: a startup failure (an import, an argument, a missing file, a
  // device at start) or one after training began.
  bool startedTraining = false;
  // What PyTorch's flight recorder says of the attempt (flight_recorder.h):
  // one line, or empty.
  std::string flightRecorder;
  bool filesKept = true;  // false: the run directory is temporary (no --log_dir)
};

std::string formatFailureReport(const FailureSummary& summary);

}  // namespace ddprun::agent
