// CollectiveBackend: what a communication library (Gloo, NCCL) provides to
// ProcessGroup. Each call validates its tensors, enqueues the operation and
// returns at once; operations run in the order they were issued.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>

#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  virtual Backend kind() const = 0;
  // The device a tensor for this backend lives on ("cpu", "cuda:1").
  virtual std::string device() const = 0;
  // Throws ConfigError when `tensor` cannot take part (wrong device, not
  // contiguous, unsupported dtype); `what` names the collective.
  virtual void validate(const at::Tensor& tensor, const char* what) const = 0;

  // In place; kAvg divides by the group size.
  virtual std::shared_ptr<Work> allReduce(const at::Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root) = 0;
  // `output` holds size() copies of `input`'s shape, contiguous.
  virtual std::shared_ptr<Work> allGather(const at::Tensor& input, const at::Tensor& output) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
};

}  // namespace ddprun::worker
