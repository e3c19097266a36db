// GroupOutcome: how one attempt's worker group ended, as the group reports
// it once every worker has been reaped and its output drained.
//
// Thread-safety: a plain value.
#pragma once

#include <optional>
#include <vector>

#include "failure_report.h"

namespace ddprun::agent {

struct GroupOutcome {
  bool succeeded = false;
  std::optional<WorkerFailure> rootCause;
  std::vector<WorkerFailure> otherFailures;
  std::vector<int> stoppedRanks;  // ranks the group stopped (not failures)
};

}  // namespace ddprun::agent
