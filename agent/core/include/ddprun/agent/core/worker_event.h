// WorkerEvent: what happened to one worker of an attempt (started, or ended
// and how), as the workers' room (WorkerGroup) tells it to whoever listens:
// the event log feature records it as torchelastic's
// torchelastic.worker.status.<state> event. A value both rooms see, so
// neither includes the other; the agent's root connects them.
//
// Thread-safety: values; the listener is called on the agent's loop thread.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ddprun::agent {

struct WorkerEvent {
  std::string state;  // START, SUCCEEDED, FAILED or TERMINATED (torchelastic's names)
  int rank = 0;
  int groupRank = 0;
  int localRank = 0;
  int pid = 0;                  // 0: never started
  std::optional<int> exitCode;  // the shell's code (128+N for signal N); none at START
  std::string rawError;         // why it failed, or empty
  int restartCount = 0;         // the attempt's TORCHELASTIC_RESTART_COUNT
};

using WorkerEventFn = std::function<void(const WorkerEvent&)>;

}  // namespace ddprun::agent
