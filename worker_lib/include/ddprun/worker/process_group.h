// ProcessGroup: the ranks of one training job and the collectives between
// them: LibTorch's own c10d process groups (ProcessGroupGloo for CPU
// tensors; ProcessGroupNCCL for CUDA tensors when the linked LibTorch has
// it), the ones torch.distributed uses.
//
// initProcessGroup() reads the Environment and bootstraps the c10d group
// through the job's store under the attempt's key prefix, so a restarted
// attempt never reads the keys of the one before it: ddprun's store (native
// protocol, worker credential from DDPRUN_TOKEN) when ddprun launched this
// process, else PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT as torchrun
// and torch.distributed's env:// do (see job_store.h). Every blocking call
// is bounded by the group's timeout: a peer that failed or vanished
// surfaces as ddprun::TimeoutError or ddprun::NetworkError naming this
// rank, never as an endless hang.
//
// With `debugChecks` (or DDPRUN_DEBUG_COLLECTIVES=1) the group is wrapped in
// c10d's ProcessGroupWrapper (what TORCH_DISTRIBUTED_DEBUG=DETAIL does):
// before each collective the ranks meet in a monitored barrier, which names
// the ranks that never arrived, and compare the collective's kind, dtypes
// and shapes, naming both sides when they differ.
//
// The collectives are torch.distributed's, with its semantics; subgroups
// (newGroup, nodeGroup) are groups of their own with their own ranks.
//
// Example:
//   auto group = ddprun::worker::initProcessGroup();   // auto: NCCL if CUDA
//   group->allReduce(loss, ddprun::worker::ReduceOp::kAvg);
//   bool stop = group->broadcastFlag(rank0WantsToStop);
//   auto node = group->nodeGroup();                    // the ranks of this node
//
// Thread-safety: collectives may be issued from several threads; they run
// in the order they were issued, which must be the same on every rank.
// Ownership: shared; the group owns its store connection and communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/worker/environment.h"

namespace at {
class Tensor;
}

namespace c10d {
class Store;
}

namespace ddprun::worker {

// kMpi: LibTorch's ProcessGroupMPI, for programs started by mpirun/srun
// --mpi (rank and size come from MPI, not the environment); only when the
// linked LibTorch has it (mpiAvailable()).
enum class Backend { kAuto, kNccl, kGloo, kMpi };
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

std::string toString(Backend backend);
std::string toString(ReduceOp op);
// "auto", "nccl", "gloo" or "mpi"; throws ConfigError otherwise.
Backend parseBackend(const std::string& name);

struct ProcessGroupOptions {
  Backend backend = Backend::kAuto;
  // Bound on bootstrap and on every collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Compare collectives across ranks before running them (c10d's
  // ProcessGroupWrapper: a monitored barrier and an all-gather of the
  // collective's fingerprint before each one, so slower). Also on when
  // DDPRUN_DEBUG_COLLECTIVES=1.
  bool debugChecks = false;
};

// A collective in flight. wait() blocks until it completed on this rank and
// rethrows its error (TimeoutError when a peer never took part).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  // The library's state behind the group (c10d objects, defined in
  // process_group.cc so that this header needs no torch includes).
  struct Impl;

  // Use initProcessGroup() or newGroup(); this constructor is for the
  // library itself.
  ProcessGroup(Environment environment, std::unique_ptr<Impl> impl);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // This process's rank in this group, and the group's size (for a
  // subgroup, not the job's: see globalRank()).
  int rank() const;
  int size() const;
  // The job-wide rank of this group's rank `groupRank`.
  int globalRank(int groupRank) const;
  Backend backend() const;
  const Environment& environment() const { return environment_; }
  // Where this group's tensors live: "cpu" (Gloo) or "cuda:N" (NCCL).
  std::string device() const;
  // The attempt's store (already under the attempt's and the group's
  // prefix), as c10d sees it.
  c10d::Store& store();

  // --- collectives: every rank of the group calls them in the same order.
  // Tensors are contiguous and on device(); "in place" means the tensor
  // passed in holds the result.

  // In place: every rank ends with the reduction of all ranks' tensors.
  void allReduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> allReduceAsync(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // In place: every rank ends with `root`'s tensor.
  void broadcast(at::Tensor& tensor, int root = 0);
  std::shared_ptr<Work> broadcastAsync(const at::Tensor& tensor, int root = 0);
  // In place on `root`: the reduction of all ranks' tensors (the others'
  // tensors are left unspecified, as in torch.distributed).
  void reduce(at::Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::kSum);
  // Every rank's tensor: stacked as [size(), *shape], as a list, or written
  // into `output` of shape [size() * d0, ...] (all_gather_into_tensor).
  at::Tensor allGather(const at::Tensor& tensor);
  std::vector<at::Tensor> allGatherList(const at::Tensor& tensor);
  void allGatherInto(at::Tensor& output, const at::Tensor& input);
  // On `root`: every rank's tensor, in rank order; elsewhere empty.
  std::vector<at::Tensor> gather(const at::Tensor& tensor, int root = 0);
  // `output` receives root's inputs[rank()]; `inputs` (size() tensors shaped
  // like `output`) is read on `root` only.
  void scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root = 0);
  // `output` = the reduction over ranks of their inputs[rank()]; `inputs`
  // is size() tensors shaped like `output`.
  void reduceScatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                     ReduceOp op = ReduceOp::kSum);
  // all_to_all_single with equal splits: `input`'s dim 0 in size() chunks,
  // chunk i to rank i; `output`'s chunk j comes from rank j.
  void allToAll(at::Tensor& output, const at::Tensor& input);
  // Point to point; `tag` tells apart several messages between two ranks.
  void send(const at::Tensor& tensor, int dst, int tag = 0);
  void recv(at::Tensor& tensor, int src, int tag = 0);
  void barrier();
  // Every rank reports to rank 0 within `timeout` (Gloo). A TimeoutError
  // names the ranks that did not (all of them with waitAllRanks, else the
  // first).
  void monitoredBarrier(std::chrono::milliseconds timeout, bool waitAllRanks = true);

  // Byte strings (objects the caller serialised): from `root` to every
  // rank, and every rank's to every rank.
  std::string broadcastString(const std::string& value, int root = 0);
  bool broadcastFlag(bool value, int root = 0);
  std::vector<std::string> allGatherBytes(const std::string& bytes);

  // A group of the ranks `ranks` of this group (their order gives their
  // ranks in the new group). Every rank of this group calls it, in the same
  // order, as torch.distributed.new_group; ranks outside get nullptr.
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks);
  // The ranks of this group that run on this rank's node (same GROUP_RANK),
  // one group per node; every rank calls it.
  std::shared_ptr<ProcessGroup> nodeGroup();

 private:
  friend struct ProcessGroupAccess;  // the library's own view of the c10d group
  // Checks `tensor` can take part in `what` (device, layout, dtype), else
  // throws ConfigError saying what to change.
  void validate(const at::Tensor& tensor, const char* what) const;
  void checkRank(int rank, const char* what, const char* role) const;

  Environment environment_;
  std::unique_ptr<Impl> impl_;
};

// Creates the process group of this process from Environment::detect().
// Single-process runs get a group of size 1 (no store needed). Throws
// ConfigError for unusable settings (nccl without CUDA, no store reachable).
std::shared_ptr<ProcessGroup> initProcessGroup(ProcessGroupOptions options = {});
std::shared_ptr<ProcessGroup> initProcessGroup(const Environment& environment,
                                               ProcessGroupOptions options = {});

// True when this build has the NCCL backend and a CUDA device is usable.
bool ncclAvailable();

// True when this build has the NCCL backend (it linked a CUDA build of
// LibTorch), whether or not this machine has a GPU.
bool ncclBuiltIn();

// True when the linked LibTorch has ProcessGroupMPI (Debian 13's 2.6 does,
// Debian 12's 1.13 does not).
bool mpiAvailable();

}  // namespace ddprun::worker
