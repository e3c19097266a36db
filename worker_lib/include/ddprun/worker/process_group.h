// ProcessGroup: the ranks of one training job and the collectives between
// them, over NCCL (CUDA tensors) or Gloo (CPU tensors).
//
// initProcessGroup() reads the Environment, connects to ddprun's store
// (native protocol, token from DDPRUN_TOKEN) and bootstraps the backend
// under the attempt's key prefix (DDPRUN_STORE_PREFIX), so a restarted
// attempt never reads the keys of the one before it. Every blocking call is
// bounded by the group's timeout: a peer that failed or vanished surfaces
// as ddprun::TimeoutError or ddprun::NetworkError, never as an endless hang.
//
// With `debugChecks` (or DDPRUN_DEBUG_COLLECTIVES=1) every collective first
// compares its kind, dtype and shape across ranks through the store and
// throws ddprun::Error naming both sides when they differ.
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

namespace ddprun::rendezvous {
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

class CollectiveBackend;
class CollectiveCheck;

class ProcessGroup {
 public:
  // Use initProcessGroup(); this constructor is for the library itself.
  ProcessGroup(Environment environment, std::shared_ptr<rendezvous::Store> store,
               std::unique_ptr<CollectiveBackend> backend, ProcessGroupOptions options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return environment_.rank; }
  int size() const { return environment_.worldSize; }
  Backend backend() const;
  const Environment& environment() const { return environment_; }
  // Where this group's tensors live: "cpu" (Gloo) or "cuda:N" (NCCL).
  std::string device() const;
  // The attempt's store (already under the attempt prefix).
  rendezvous::Store& store() { return *store_; }

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
  Environment environment_;
  std::shared_ptr<rendezvous::Store> store_;
  std::unique_ptr<CollectiveBackend> backend_;
  std::unique_ptr<CollectiveCheck> check_;
  ProcessGroupOptions options_;
  // Serialises issuing (check + enqueue), so every rank compares and runs
  // its collectives in the order it issued them.
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
