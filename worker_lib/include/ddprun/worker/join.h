// Join: data-parallel training when the ranks have different numbers of
// batches (uneven inputs), as Python's torch.distributed.algorithms.Join
// with a DistributedDataParallel joinable.
//
// While a Join is alive every synchronised backward pass of its DDP first
// tells the group that this rank is still training (one all-reduce, as
// Python's DDP does in forward()). A rank that has run out of batches calls
// finish(): until every rank has, it shadows each step the others still
// take — it answers their all-reduce, takes part in the bucket rebuild and
// all-reduces zero gradients bucket by bucket in the Reducer's order (and a
// zero used-parameter map with findUnusedParameters) — so nobody waits on
// it. Gradients are divided by the initial world size (a joined rank counts
// as zeros), or with divideByInitialWorldSize = false by the number of
// ranks still training. When all have finished, every rank takes the
// parameters and buffers of the last rank to finish (the highest such rank
// when several finish together), so the ranks end identical.
//
// With throwOnEarlyTermination the first rank to finish makes every rank
// throw ddprun::Error from its next synchronised step (and from finish()),
// for jobs that prefer to stop at the shortest input.
//
// Differences from Python: steps under ddp.noSync() are not shadowed (they
// run no collective, so there is nothing to answer); other collectives the
// training loop runs per step (a loss all-reduce) are not shadowed either —
// as in Python, run them after finish(). staticGraph is refused (Python's
// Join does not support it reliably either).
//
// Example:
//   dw::Join join(ddp);
//   for (auto& batch : myBatches) {        // this rank's number of batches
//     optimizer.zero_grad();
//     lossOf(batch).backward();
//     optimizer.step();
//   }
//   join.finish();                         // shadows the others; then all equal
//
// Thread-safety: one training thread; the DDP must outlive the Join, and at
// most one Join per DDP at a time. Without finish() the destructor only
// leaves join mode (the other ranks then wait on this one until their
// collective timeout).
#pragma once

namespace ddprun::worker {

class DistributedDataParallel;

struct JoinOptions {
  // Divide gradients by the group size even when ranks have finished
  // (Python's divide_by_initial_world_size, default true).
  bool divideByInitialWorldSize = true;
  // The first rank to finish makes every rank throw (Python's
  // throw_on_early_termination).
  bool throwOnEarlyTermination = false;
};

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no more batches: shadows the other ranks' synchronised
  // steps until every rank called finish(), then synchronises the final
  // model. Throws TimeoutError/NetworkError when a collective fails, and
  // ddprun::Error under throwOnEarlyTermination when another rank is still
  // training. Call it once.
  void finish();

  // How many steps of the other ranks this rank shadowed in finish().
  int shadowedSteps() const { return shadowed_; }

 private:
  DistributedDataParallel& ddp_;
  JoinOptions options_;
  bool finished_ = false;
  int shadowed_ = 0;
};

}  // namespace ddprun::worker
