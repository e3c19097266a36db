#include "ddprun/worker/process_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "attempt_store.h"
#include "collective_backend.h"
#include "collective_check.h"
#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store.h"
#include "gloo_backend.h"
#include "tensor_description.h"
#ifdef DDPRUN_HAVE_NCCL
#include "nccl_backend.h"
#endif

namespace ddprun::worker {

namespace {

constexpr char kDebugVariable[] = "DDPRUN_DEBUG_COLLECTIVES";

bool debugRequested(const ProcessGroupOptions& options) {
  const char* value = std::getenv(kDebugVariable);
  return options.debugChecks || (value != nullptr && std::strcmp(value, "1") == 0);
}

}  // namespace

std::string toString(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kNccl:
      return "nccl";
    case Backend::kGloo:
      return "gloo";
  }
  return "?";
}

std::string toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

Backend parseBackend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "nccl") return Backend::kNccl;
  if (name == "gloo") return Backend::kGloo;
  throw ConfigError(fmt::format("unknown backend '{}'; use auto, nccl or gloo", name));
}

ProcessGroup::ProcessGroup(Environment environment, std::shared_ptr<rendezvous::Store> store,
                           std::unique_ptr<CollectiveBackend> backend, ProcessGroupOptions options)
    : environment_(std::move(environment)),
      store_(std::move(store)),
      backend_(std::move(backend)),
      options_(options) {
  if (store_ && debugRequested(options_)) {
    check_ = std::make_unique<CollectiveCheck>(*store_, rank(), size(), options_.timeout);
  }
}

ProcessGroup::~ProcessGroup() = default;

Backend ProcessGroup::backend() const { return backend_->kind(); }

std::string ProcessGroup::device() const { return backend_->device(); }

std::shared_ptr<Work> ProcessGroup::allReduceAsync(const at::Tensor& tensor, ReduceOp op) {
  backend_->validate(tensor, "all_reduce");
  std::lock_guard lock(issueMutex_);
  if (check_)
    check_->check(fmt::format("all_reduce({}, {})", describeTensor(tensor), toString(op)));
  return backend_->allReduce(tensor, op);
}

void ProcessGroup::allReduce(at::Tensor& tensor, ReduceOp op) {
  allReduceAsync(tensor, op)->wait();
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  backend_->validate(tensor, "broadcast");
  if (root < 0 || root >= size()) {
    throw ConfigError(
        fmt::format("broadcast: root {} is not a rank of this group (0..{})", root, size() - 1));
  }
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    if (check_) check_->check(fmt::format("broadcast({}, root={})", describeTensor(tensor), root));
    work = backend_->broadcast(tensor, root);
  }
  work->wait();
}

at::Tensor ProcessGroup::allGather(const at::Tensor& tensor) {
  backend_->validate(tensor, "all_gather");
  std::vector<int64_t> shape{size()};
  for (auto extent : tensor.sizes()) shape.push_back(extent);
  at::Tensor output = at::empty(shape, tensor.options());
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    if (check_) check_->check(fmt::format("all_gather({})", describeTensor(tensor)));
    work = backend_->allGather(tensor, output);
  }
  work->wait();
  return output;
}

void ProcessGroup::barrier() {
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    if (check_) check_->check("barrier()");
    work = backend_->barrier();
  }
  work->wait();
}

std::string ProcessGroup::broadcastString(const std::string& value, int root) {
  const auto device = at::Device(backend_->device());
  at::Tensor length = at::full({1}, static_cast<int64_t>(value.size()),
                               at::TensorOptions().dtype(at::kLong).device(device));
  broadcast(length, root);
  const auto bytes = length.cpu().item<int64_t>();
  at::Tensor data = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  if (rank() == root) std::memcpy(data.data_ptr(), value.data(), value.size());
  data = data.to(device);
  broadcast(data, root);
  data = data.cpu();
  return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(bytes));
}

bool ProcessGroup::broadcastFlag(bool value, int root) {
  const auto device = at::Device(backend_->device());
  at::Tensor flag =
      at::full({1}, value ? 1 : 0, at::TensorOptions().dtype(at::kByte).device(device));
  broadcast(flag, root);
  return flag.cpu().item<uint8_t>() != 0;
}

bool ncclAvailable() {
#ifdef DDPRUN_HAVE_NCCL
  return at::hasCUDA() && cudaDeviceCount() > 0;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> initProcessGroup(ProcessGroupOptions options) {
  return initProcessGroup(Environment::detect(), options);
}

std::shared_ptr<ProcessGroup> initProcessGroup(const Environment& environment,
                                               ProcessGroupOptions options) {
  Backend kind = options.backend;
  if (kind != Backend::kGloo) {
    const bool nccl = ncclAvailable();
    if (kind == Backend::kAuto) kind = nccl ? Backend::kNccl : Backend::kGloo;
    if (kind == Backend::kNccl && !nccl) {
      throw ConfigError(
#ifdef DDPRUN_HAVE_NCCL
          "the nccl backend needs a CUDA device and a CUDA build of LibTorch, and this process "
          "has none; use the gloo backend (or auto) for CPU training"
#else
          "this build of ddprun::worker has no NCCL backend (CUDA or NCCL was not found when it "
          "was built); use the gloo backend (or auto) for CPU training"
#endif
      );
    }
  }
  // Each group of this process gets its own keys ("pg0/", "pg1/", ...);
  // every rank creates its groups in the same order.
  static std::atomic<int> groups{0};
  const std::string groupPrefix = fmt::format("pg{}/", groups++);
  auto store = connectAttemptStore(environment, groupPrefix, options.timeout);
  std::unique_ptr<CollectiveBackend> backend;
#ifdef DDPRUN_HAVE_NCCL
  if (kind == Backend::kNccl) backend = makeNcclBackend(store.get(), environment, options.timeout);
#endif
  if (!backend) backend = makeGlooBackend(store.get(), environment, options.timeout);
  return std::make_shared<ProcessGroup>(environment, std::move(store), std::move(backend), options);
}

}  // namespace ddprun::worker
