// Tells the agent how this worker gets on (docs/operations.md, "Downtime,
// phase by phase"): its process group formed, and its training steps (a
// synchronised backward pass of DistributedDataParallel). Each report is
// one JSON line, {"pid", "event", "step"}, written with one non-blocking
// write to the agent's pipe (DDPRUN_PROGRESS_PIPE); steps are reported on
// the first and then at most once a second. Without the variable, or when
// the write fails, nothing happens: a report never fails a step.
//
// Thread-safety: both functions may be called from any thread.
#pragma once

namespace ddprun::worker {

void reportProcessGroupFormed();
void reportStep();

}  // namespace ddprun::worker
