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
// Example:
//   auto group = ddprun::worker::initProcessGroup();   // auto: NCCL if CUDA
//   group->allReduce(loss, ddprun::worker::ReduceOp::kAvg);
//   bool stop = group->broadcastFlag(rank0WantsToStop);
//
// Thread-safety: collectives may be issued from several threads; they run
// in the order they were issued, which must be the same on every rank.
// Ownership: shared; the group owns its store connection and communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
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

enum class Backend { kAuto, kNccl, kGloo };
enum class ReduceOp { kSum, kAvg, kMin, kMax };

std::string toString(Backend backend);
std::string toString(ReduceOp op);
// "auto", "nccl" or "gloo"; throws ConfigError otherwise.
Backend parseBackend(const std::string& name);

struct ProcessGroupOptions {
  Backend backend = Backend::kAuto;
  // Bound on bootstrap and on every collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Compare collectives across ranks before running them (slower: one store
  // round trip per collective). Also on when DDPRUN_DEBUG_COLLECTIVES=1.
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

  // Use initProcessGroup(); this constructor is for the library itself.
  ProcessGroup(Environment environment, std::unique_ptr<Impl> impl, ProcessGroupOptions options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return environment_.rank; }
  int size() const { return environment_.worldSize; }
  Backend backend() const;
  const Environment& environment() const { return environment_; }
  // Where this group's tensors live: "cpu" (Gloo) or "cuda:N" (NCCL).
  std::string device() const;
  // The attempt's store (already under the attempt's and the group's
  // prefix), as c10d sees it.
  c10d::Store& store();

  // In place: every rank ends with the reduction of all ranks' tensors.
  void allReduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> allReduceAsync(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // In place: every rank ends with `root`'s tensor.
  void broadcast(at::Tensor& tensor, int root = 0);
  // Returns a tensor of shape [size(), *tensor.shape] holding every rank's.
  at::Tensor allGather(const at::Tensor& tensor);
  void barrier();

  // Small objects from `root` to every rank (an early-stop flag, a string).
  std::string broadcastString(const std::string& value, int root = 0);
  bool broadcastFlag(bool value, int root = 0);

 private:
  // Checks `tensor` can take part in `what` (device, layout, dtype), else
  // throws ConfigError saying what to change.
  void validate(const at::Tensor& tensor, const char* what) const;
  // Waits for a c10d collective, turning its failure into a ddprun error.
  class C10dWork;

  Environment environment_;
  std::unique_ptr<Impl> impl_;
  ProcessGroupOptions options_;
  // Serialises issuing, so every rank enqueues its collectives in the order
  // it issued them.
  std::mutex issueMutex_;
};

// Creates the process group of this process from Environment::detect().
// Single-process runs get a group of size 1 (no store needed). Throws
// ConfigError for unusable settings (nccl without CUDA, no store reachable).
std::shared_ptr<ProcessGroup> initProcessGroup(ProcessGroupOptions options = {});
std::shared_ptr<ProcessGroup> initProcessGroup(const Environment& environment,
                                               ProcessGroupOptions options = {});

// True when this build has the NCCL backend and a CUDA device is usable.
bool ncclAvailable();

}  // namespace ddprun::worker
