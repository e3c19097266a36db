#include "ddprun/worker/process_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupWrapper.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include "c10d_group.h"
#include "ddprun/common/error.h"
#include "job_store.h"
#include "tensor_description.h"

namespace ddprun::worker {

namespace {

constexpr char kDebugVariable[] = "DDPRUN_DEBUG_COLLECTIVES";

bool debugRequested(const ProcessGroupOptions& options) {
  const char* value = std::getenv(kDebugVariable);
  return options.debugChecks || (value != nullptr && std::strcmp(value, "1") == 0);
}

// c10d's failures are c10::Error (std::exception) with Gloo's or NCCL's
// text; a timeout among them becomes TimeoutError, a mismatch that the
// debug wrapper found ddprun::Error, anything else NetworkError, all naming
// this rank and the collective.
[[noreturn]] void rethrow(const std::exception& e, int rank, int size, const std::string& what) {
  const std::string text = e.what();
  // c10::Error appends a C++ backtrace after the first line; keep the message.
  const std::string message = text.substr(0, text.find("\nException raised from"));
  const std::string full = fmt::format("rank {} of {}: {} failed: {}", rank, size, what, message);
  if (message.find("Detected mismatch between collectives") != std::string::npos) {
    throw Error(full);  // the ranks issued different collectives: a bug, not the network
  }
  if (message.find("imed out") != std::string::npos ||
      message.find("imeout") != std::string::npos ||
      message.find("monitoredBarrier") != std::string::npos) {
    throw TimeoutError(full);
  }
  throw NetworkError(full);
}

c10d::ReduceOp toC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // Gloo has no AVG: a sum, divided on completion
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// The Gloo device: GLOO_SOCKET_IFNAME when set (as torch.distributed),
// loopback when every rank is on this node, else this host's name.
std::shared_ptr<::gloo::transport::Device> glooDevice(const Environment& environment) {
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(iface);
  }
  if (environment.worldSize == environment.localWorldSize) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> makeGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const Environment& environment, int rank,
                                                    int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(glooDevice(environment));
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  } catch (const std::exception& e) {
    const std::string text = e.what();
    throw NetworkError(fmt::format(
        "rank {} could not connect Gloo to its {} peers: {} (check that every rank started and "
        "that GLOO_SOCKET_IFNAME names an interface the other nodes can reach)",
        rank, size - 1, text.substr(0, text.find("\nException raised from"))));
  }
}

}  // namespace

struct ProcessGroup::Impl {
  Backend kind = Backend::kGloo;
  std::string device = "cpu";
  c10::intrusive_ptr<c10d::Store> store;
  C10dGroupPtr group;
};

class ProcessGroup::C10dWork : public Work {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> after,
           const ProcessGroup& group, std::string what)
      : work_(std::move(work)), after_(std::move(after)), group_(group), what_(std::move(what)) {}

  void wait() override {
    try {
      work_->wait(group_.options_.timeout);
    } catch (const std::exception& e) {
      rethrow(e, group_.rank(), group_.size(), what_);
    }
    if (after_) {
      after_();
      after_ = nullptr;
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> after_;
  const ProcessGroup& group_;
  std::string what_;
};

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

ProcessGroup::ProcessGroup(Environment environment, std::unique_ptr<Impl> impl,
                           ProcessGroupOptions options)
    : environment_(std::move(environment)), impl_(std::move(impl)), options_(options) {}

ProcessGroup::~ProcessGroup() = default;

Backend ProcessGroup::backend() const { return impl_->kind; }

std::string ProcessGroup::device() const { return impl_->device; }

c10d::Store& ProcessGroup::store() { return *impl_->store; }

void ProcessGroup::validate(const at::Tensor& tensor, const char* what) const {
  if (!tensor.defined()) throw ConfigError(fmt::format("{}: the tensor is undefined", what));
  if (tensor.device() != at::Device(impl_->device)) {
    throw ConfigError(fmt::format(
        "{}: this {} process group takes tensors on {}, got {}; move the tensor with .to()", what,
        toString(impl_->kind), impl_->device, describeTensor(tensor)));
  }
  if (!tensor.is_contiguous()) {
    throw ConfigError(
        fmt::format("{}: the tensor is not contiguous; call .contiguous() first", what));
  }
  switch (tensor.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return;
    case at::kBFloat16:
    case at::kBool:
      if (impl_->kind == Backend::kNccl) return;
      break;
    default:
      break;
  }
  throw ConfigError(fmt::format(
      "{}: the {} process group cannot reduce or move {} tensors; use float32, float64, "
      "float16, int8, uint8, int32 or int64 (convert with .to(torch::kFloat))",
      what, toString(impl_->kind), dtypeName(tensor.scalar_type())));
}

std::shared_ptr<Work> ProcessGroup::allReduceAsync(const at::Tensor& tensor, ReduceOp op) {
  validate(tensor, "all_reduce");
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw ConfigError(fmt::format(
        "all_reduce: an average of {} tensors is not an integer; reduce a floating-point "
        "tensor, or use ReduceOp::kSum and divide yourself",
        dtypeName(tensor.scalar_type())));
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = toC10d(op);
  options.timeout = options_.timeout;
  std::function<void()> after;
  if (op == ReduceOp::kAvg && size() > 1) {
    after = [tensor, n = size()]() mutable { tensor.div_(n); };
  }
  const std::string what = fmt::format("all_reduce({}, {})", describeTensor(tensor), toString(op));
  std::lock_guard lock(issueMutex_);
  try {
    return std::make_shared<C10dWork>(impl_->group->allreduce(tensors, options), std::move(after),
                                      *this, what);
  } catch (const std::exception& e) {
    rethrow(e, rank(), size(), what);
  }
}

void ProcessGroup::allReduce(at::Tensor& tensor, ReduceOp op) {
  allReduceAsync(tensor, op)->wait();
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  validate(tensor, "broadcast");
  if (root < 0 || root >= size()) {
    throw ConfigError(
        fmt::format("broadcast: root {} is not a rank of this group (0..{})", root, size() - 1));
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = options_.timeout;
  const std::string what = fmt::format("broadcast({}, root={})", describeTensor(tensor), root);
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    try {
      work = std::make_shared<C10dWork>(impl_->group->broadcast(tensors, options), nullptr, *this,
                                        what);
    } catch (const std::exception& e) {
      rethrow(e, rank(), size(), what);
    }
  }
  work->wait();
}

at::Tensor ProcessGroup::allGather(const at::Tensor& tensor) {
  validate(tensor, "all_gather");
  std::vector<int64_t> shape{size()};
  for (auto extent : tensor.sizes()) shape.push_back(extent);
  at::Tensor output = at::empty(shape, tensor.options());
  // c10d fills one tensor per rank: the rows of `output`, in place.
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(output[r]);
  std::vector<at::Tensor> inputs{tensor};
  c10d::AllgatherOptions options;
  options.timeout = options_.timeout;
  const std::string what = fmt::format("all_gather({})", describeTensor(tensor));
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    try {
      work = std::make_shared<C10dWork>(impl_->group->allgather(outputs, inputs, options), nullptr,
                                        *this, what);
    } catch (const std::exception& e) {
      rethrow(e, rank(), size(), what);
    }
  }
  work->wait();
  return output;
}

void ProcessGroup::barrier() {
  c10d::BarrierOptions options;
  options.timeout = options_.timeout;
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(issueMutex_);
    try {
      work = std::make_shared<C10dWork>(impl_->group->barrier(options), nullptr, *this, "barrier");
    } catch (const std::exception& e) {
      rethrow(e, rank(), size(), "barrier");
    }
  }
  work->wait();
}

std::string ProcessGroup::broadcastString(const std::string& value, int root) {
  const auto device = at::Device(impl_->device);
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
  const auto device = at::Device(impl_->device);
  at::Tensor flag =
      at::full({1}, value ? 1 : 0, at::TensorOptions().dtype(at::kByte).device(device));
  broadcast(flag, root);
  return flag.cpu().item<uint8_t>() != 0;
}

bool ncclAvailable() { return c10dNcclAvailable(); }

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
          "the nccl backend needs a CUDA device and a LibTorch built with NCCL, and this process "
          "has neither; use the gloo backend (or auto) for CPU training");
    }
  }
  // Each group of this process gets its own keys ("pg0/", "pg1/", ...);
  // every rank creates its groups in the same order.
  static std::atomic<int> groups{0};
  const std::string groupPrefix = fmt::format("pg{}/", groups++);
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->kind = kind;
  int rank = environment.rank;
  int size = environment.worldSize;
  impl->store = connectJobStore(environment, groupPrefix, options.timeout);
  if (!impl->store) {
    // One process: the same c10d group over an in-process store.
    impl->store = c10::make_intrusive<c10d::HashStore>();
    rank = 0;
    size = 1;
  }
  if (kind == Backend::kNccl) {
    impl->group = makeC10dNccl(impl->store, environment, rank, size, options.timeout, impl->device);
  } else {
    impl->group = makeGloo(impl->store, environment, rank, size, options.timeout);
  }
  if (debugRequested(options) && size > 1) {
    // ProcessGroupWrapper checks every collective through a Gloo group of
    // its own (its monitored barrier names the ranks that never came).
    auto helperStore = c10::make_intrusive<c10d::PrefixStore>("debug/", impl->store);
    auto helper = makeGloo(helperStore, environment, rank, size, options.timeout);
    impl->group = c10::make_intrusive<c10d::ProcessGroupWrapper>(impl->group, helper);
  }
  return std::make_shared<ProcessGroup>(environment, std::move(impl), options);
}

}  // namespace ddprun::worker
