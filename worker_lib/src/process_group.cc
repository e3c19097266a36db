#include "ddprun/worker/process_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupWrapper.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include <unistd.h>

#include "c10d_group.h"
#include "ddprun/common/error.h"
#include "error_text.h"
#include "group_arrival.h"
#include "job_store.h"
#include "process_group_access.h"
#include "progress_report.h"
#include "tensor_description.h"

namespace ddprun::worker {

namespace {

constexpr char kDebugVariable[] = "DDPRUN_DEBUG_COLLECTIVES";

bool debugRequested(const ProcessGroupOptions& options) {
  const char* value = std::getenv(kDebugVariable);
  return options.debugChecks || (value != nullptr && std::strcmp(value, "1") == 0);
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
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
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
    throw NetworkError(fmt::format(
        "rank {} could not connect Gloo to its {} peers: {} (check that every rank started and "
        "that GLOO_SOCKET_IFNAME names an interface the other nodes can reach)",
        rank, size - 1, messageOf(e)));
  }
}

// A c10d collective in flight; its failure becomes a ddprun error naming
// the rank and the collective. Its timeout is the collective's own (every
// collective's options carry the group's), so wait() adds none: a second
// bound would make NCCL's wait spin the CPU.
class C10dWork : public Work {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> after, int rank, int size,
           std::function<std::string()> describe)
      : work_(std::move(work)),
        after_(std::move(after)),
        rank_(rank),
        size_(size),
        describe_(std::move(describe)) {}

  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      rethrowCollectiveError(e, rank_, size_, describe_());
    }
    if (after_) {
      after_();
      after_ = nullptr;
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> after_;
  int rank_;
  int size_;
  std::function<std::string()> describe_;  // formatted only for an error message
};

}  // namespace

struct ProcessGroup::Impl {
  Backend kind = Backend::kGloo;
  std::string device = "cpu";
  c10::intrusive_ptr<c10d::Store> store;
  C10dGroupPtr group;
  // The group as a c10d::ProcessGroup for the Reducer (made on first use).
  c10::intrusive_ptr<c10d::ProcessGroup> dispatcher;
  int rank = 0;
  int size = 1;
  std::vector<int> globalRanks;  // group rank -> job rank; empty: the same
  std::chrono::milliseconds timeout{0};
  bool debug = false;
  // Serialises issuing, so every rank enqueues its collectives in the order
  // it issued them.
  std::mutex issueMutex;
  std::atomic<int> subgroups{0};

  // An NCCL group is shut down as Python's destroy_process_group does:
  // LibTorch 2.x warns at exit ("destroy_process_group() was not called")
  // and may leak the communicator otherwise.
  ~Impl() {
    if (kind == Backend::kNccl && group) shutDown(*group);
  }

  // Backend::shutdown() where the LibTorch has it (not 1.13 or 2.6).
  template <typename Group>
  static void shutDown(Group& g) {
    if constexpr (requires { g.shutdown(); }) {
      try {
        g.shutdown();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddprun::worker: shutting the nccl group down failed: %s\n",
                     messageOf(e).c_str());
      }
    }
  }

  // Starts a c10d collective (`start` returns its Work) under the issue
  // lock; `after` runs once it completed. `describe` names the collective
  // in an error message (called only then: no formatting on success).
  template <typename Start>
  std::shared_ptr<Work> issue(std::function<std::string()> describe, Start&& start,
                              std::function<void()> after = nullptr) {
    std::lock_guard lock(issueMutex);
    try {
      return std::make_shared<C10dWork>(start(*group), std::move(after), rank, size,
                                        std::move(describe));
    } catch (const std::exception& e) {
      rethrowCollectiveError(e, rank, size, describe());
    }
  }
};

namespace {

// The c10d group of `rank` among `size` over `store`: Gloo or NCCL, wrapped
// for the debug checks when asked.
void connect(ProcessGroup::Impl& impl, const Environment& environment) {
  // Before the backend connects: a rank that never comes is named in time.
  awaitGroupArrival(*impl.store, impl.rank, impl.size, impl.timeout,
                    fmt::format("the {} group", toString(impl.kind)));
  if (impl.kind == Backend::kNccl) {
    impl.group =
        makeC10dNccl(impl.store, environment, impl.rank, impl.size, impl.timeout, impl.device);
  } else {
    impl.group = makeGloo(impl.store, environment, impl.rank, impl.size, impl.timeout);
  }
  if (impl.debug && impl.size > 1) {
    // ProcessGroupWrapper checks every collective through a Gloo group of
    // its own (its monitored barrier names the ranks that never came).
    auto helperStore = c10::make_intrusive<c10d::PrefixStore>("debug", impl.store);
    auto helper = makeGloo(helperStore, environment, impl.rank, impl.size, impl.timeout);
    impl.group = c10::make_intrusive<c10d::ProcessGroupWrapper>(impl.group, helper);
  }
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
    case Backend::kMpi:
      return "mpi";
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
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

Backend parseBackend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "nccl") return Backend::kNccl;
  if (name == "gloo") return Backend::kGloo;
  if (name == "mpi") return Backend::kMpi;
  throw ConfigError(fmt::format("unknown backend '{}'; use auto, nccl, gloo or mpi", name));
}

ProcessGroup::ProcessGroup(Environment environment, std::unique_ptr<Impl> impl)
    : environment_(std::move(environment)), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->rank; }

int ProcessGroup::size() const { return impl_->size; }

int ProcessGroup::globalRank(int groupRank) const {
  checkRank(groupRank, "globalRank", "rank");
  return impl_->globalRanks.empty() ? groupRank : impl_->globalRanks[groupRank];
}

Backend ProcessGroup::backend() const { return impl_->kind; }

std::string ProcessGroup::device() const { return impl_->device; }

c10d::Store& ProcessGroup::store() { return *impl_->store; }

void ProcessGroup::checkRank(int rank, const char* what, const char* role) const {
  if (rank < 0 || rank >= size()) {
    throw ConfigError(fmt::format("{}: {} {} is not a rank of this group of {} (0..{})", what, role,
                                  rank, size(), size() - 1));
  }
}

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
    case at::kHalf:
      if (impl_->kind == Backend::kMpi) break;  // MPI has no half type
      return;
    case at::kFloat:
    case at::kDouble:
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

namespace {

// kAvg of integers is not an integer: refused rather than truncated.
void checkAverage(const at::Tensor& tensor, ReduceOp op, const char* what) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw ConfigError(fmt::format(
        "{}: an average of {} tensors is not an integer; reduce a floating-point tensor, or use "
        "ReduceOp::kSum and divide yourself",
        what, dtypeName(tensor.scalar_type())));
  }
}

// Gloo has no AVG: the sum is divided once the work completed.
std::function<void()> averageAfter(at::Tensor tensor, ReduceOp op, int size) {
  if (op != ReduceOp::kAvg || size == 1) return nullptr;
  return [tensor, size]() mutable { tensor.div_(size); };
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::allReduceAsync(const at::Tensor& tensor, ReduceOp op) {
  validate(tensor, "all_reduce");
  checkAverage(tensor, op, "all_reduce");
  c10d::AllreduceOptions options;
  options.reduceOp = toC10d(op);
  options.timeout = impl_->timeout;
  return impl_->issue(
      [=] { return fmt::format("all_reduce({}, {})", describeTensor(tensor), toString(op)); },
      [&](C10dGroup& g) {
        std::vector<at::Tensor> tensors{tensor};
        return g.allreduce(tensors, options);
      },
      averageAfter(tensor, op, size()));
}

void ProcessGroup::allReduce(at::Tensor& tensor, ReduceOp op) {
  allReduceAsync(tensor, op)->wait();
}

std::shared_ptr<Work> ProcessGroup::broadcastAsync(const at::Tensor& tensor, int root) {
  validate(tensor, "broadcast");
  checkRank(root, "broadcast", "root");
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = impl_->timeout;
  return impl_->issue(
      [=] { return fmt::format("broadcast({}, root={})", describeTensor(tensor), root); },
      [&](C10dGroup& g) {
        std::vector<at::Tensor> tensors{tensor};
        return g.broadcast(tensors, options);
      });
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) { broadcastAsync(tensor, root)->wait(); }

void ProcessGroup::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  validate(tensor, "reduce");
  checkRank(root, "reduce", "root");
  checkAverage(tensor, op, "reduce");
  c10d::ReduceOptions options;
  options.reduceOp = toC10d(op);
  options.rootRank = root;
  options.timeout = impl_->timeout;
  impl_
      ->issue(
          [=] {
            return fmt::format("reduce({}, root={}, {})", describeTensor(tensor), root,
                               toString(op));
          },
          [&](C10dGroup& g) {
            std::vector<at::Tensor> tensors{tensor};
            return g.reduce(tensors, options);
          },
          rank() == root ? averageAfter(tensor, op, size()) : nullptr)
      ->wait();
}

std::vector<at::Tensor> ProcessGroup::allGatherList(const at::Tensor& tensor) {
  validate(tensor, "all_gather");
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(tensor));
  c10d::AllgatherOptions options;
  options.timeout = impl_->timeout;
  impl_
      ->issue([=] { return fmt::format("all_gather({})", describeTensor(tensor)); },
              [&](C10dGroup& g) {
                std::vector<at::Tensor> inputs{tensor};
                return g.allgather(outputs, inputs, options);
              })
      ->wait();
  return std::move(outputs[0]);
}

at::Tensor ProcessGroup::allGather(const at::Tensor& tensor) {
  return at::stack(allGatherList(tensor));
}

void ProcessGroup::allGatherInto(at::Tensor& output, const at::Tensor& input) {
  validate(output, "all_gather_into_tensor");
  if (input.dim() == 0 || output.dim() != input.dim() || output.size(0) != input.size(0) * size() ||
      output.sizes().slice(1) != input.sizes().slice(1) ||
      output.scalar_type() != input.scalar_type()) {
    throw ConfigError(fmt::format(
        "all_gather_into_tensor: the output must be the input's dtype with {} times its first "
        "dimension, got {} for {}",
        size(), describeTensor(output), describeTensor(input)));
  }
  output.copy_(at::cat(allGatherList(input)));
}

std::vector<at::Tensor> ProcessGroup::gather(const at::Tensor& tensor, int root) {
  validate(tensor, "gather");
  checkRank(root, "gather", "root");
  std::vector<std::vector<at::Tensor>> outputs;
  if (rank() == root) {
    outputs.emplace_back();
    for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(tensor));
  }
  c10d::GatherOptions options;
  options.rootRank = root;
  options.timeout = impl_->timeout;
  impl_
      ->issue([=] { return fmt::format("gather({}, root={})", describeTensor(tensor), root); },
              [&](C10dGroup& g) {
                std::vector<at::Tensor> inputs{tensor};
                return g.gather(outputs, inputs, options);
              })
      ->wait();
  return outputs.empty() ? std::vector<at::Tensor>{} : std::move(outputs[0]);
}

void ProcessGroup::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  validate(output, "scatter");
  checkRank(root, "scatter", "root");
  std::vector<std::vector<at::Tensor>> c10dInputs;
  if (rank() == root) {
    if (static_cast<int>(inputs.size()) != size()) {
      throw ConfigError(fmt::format("scatter: the root passes one tensor per rank ({}), got {}",
                                    size(), inputs.size()));
    }
    for (const auto& input : inputs) validate(input, "scatter");
    c10dInputs.push_back(inputs);
  }
  c10d::ScatterOptions options;
  options.rootRank = root;
  options.timeout = impl_->timeout;
  impl_
      ->issue([=] { return fmt::format("scatter({}, root={})", describeTensor(output), root); },
              [&](C10dGroup& g) {
                std::vector<at::Tensor> outputs{output};
                return g.scatter(outputs, c10dInputs, options);
              })
      ->wait();
}

void ProcessGroup::reduceScatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                 ReduceOp op) {
  validate(output, "reduce_scatter");
  checkAverage(output, op, "reduce_scatter");
  if (static_cast<int>(inputs.size()) != size()) {
    throw ConfigError(
        fmt::format("reduce_scatter: pass one input per rank ({}), got {}", size(), inputs.size()));
  }
  for (const auto& input : inputs) {
    validate(input, "reduce_scatter");
    if (input.sizes() != output.sizes()) {
      throw ConfigError(
          fmt::format("reduce_scatter: every input must be shaped like the output "
                      "({}), got {}",
                      describeTensor(output), describeTensor(input)));
    }
  }
  if (impl_->kind != Backend::kNccl) {
    // LibTorch 1.13's ProcessGroupGloo and ProcessGroupMPI have no
    // reduce_scatter: one all_reduce of the stacked inputs, then this
    // rank's slice.
    at::Tensor all = at::stack(inputs);
    allReduce(all, op);
    output.copy_(all[rank()]);
    return;
  }
  c10d::ReduceScatterOptions options;
  options.reduceOp = toC10d(op);
  options.timeout = impl_->timeout;
  impl_
      ->issue(
          [=] {
            return fmt::format("reduce_scatter({}, {})", describeTensor(output), toString(op));
          },
          [&](C10dGroup& g) {
            std::vector<at::Tensor> outputs{output};
            std::vector<std::vector<at::Tensor>> lists{inputs};
            return g.reduce_scatter(outputs, lists, options);
          },
          averageAfter(output, op, size()))
      ->wait();
}

void ProcessGroup::allToAll(at::Tensor& output, const at::Tensor& input) {
  validate(output, "all_to_all");
  validate(input, "all_to_all");
  if (input.dim() == 0 || input.size(0) % size() != 0 || output.sizes() != input.sizes()) {
    throw ConfigError(fmt::format(
        "all_to_all: input and output must have the same shape with a first dimension divisible "
        "by {}, got {} and {}",
        size(), describeTensor(input), describeTensor(output)));
  }
  c10d::AllToAllOptions options;
  options.timeout = impl_->timeout;
  impl_
      ->issue([=] { return fmt::format("all_to_all({})", describeTensor(input)); },
              [&](C10dGroup& g) {
                std::vector<int64_t> equal;
                at::Tensor out = output;
                at::Tensor in = input;
                return g.alltoall_base(out, in, equal, equal, options);
              })
      ->wait();
}

void ProcessGroup::send(const at::Tensor& tensor, int dst, int tag) {
  validate(tensor, "send");
  checkRank(dst, "send", "destination");
  impl_
      ->issue(
          [=] { return fmt::format("send({}, to={}, tag={})", describeTensor(tensor), dst, tag); },
          [&](C10dGroup& g) {
            std::vector<at::Tensor> tensors{tensor};
            return g.send(tensors, dst, tag);
          })
      ->wait();
}

void ProcessGroup::recv(at::Tensor& tensor, int src, int tag) {
  validate(tensor, "recv");
  checkRank(src, "recv", "source");
  impl_
      ->issue(
          [=] {
            return fmt::format("recv({}, from={}, tag={})", describeTensor(tensor), src, tag);
          },
          [&](C10dGroup& g) {
            std::vector<at::Tensor> tensors{tensor};
            return g.recv(tensors, src, tag);
          })
      ->wait();
}

void ProcessGroup::barrier() {
  c10d::BarrierOptions options;
  options.timeout = impl_->timeout;
  impl_
      ->issue([] { return std::string("barrier"); },
              [&](C10dGroup& g) { return g.barrier(options); })
      ->wait();
}

void ProcessGroup::monitoredBarrier(std::chrono::milliseconds timeout, bool waitAllRanks) {
  if (impl_->kind != Backend::kGloo) {
    throw ConfigError(
        "monitoredBarrier: c10d offers it for Gloo groups only; make a Gloo group "
        "(Backend::kGloo) for it");
  }
  c10d::BarrierOptions options;
  options.timeout = timeout;
  std::lock_guard lock(impl_->issueMutex);
  try {
    impl_->group->monitoredBarrier(options, waitAllRanks);
  } catch (const std::exception& e) {
    rethrowCollectiveError(e, rank(), size(), "monitored_barrier");
  }
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

std::vector<std::string> ProcessGroup::allGatherBytes(const std::string& bytes) {
  const auto device = at::Device(impl_->device);
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor lengths =
      allGather(at::full({1}, static_cast<int64_t>(bytes.size()), longs)).cpu();
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor padded = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  const at::Tensor all = allGather(padded.to(device)).cpu().contiguous();
  std::vector<std::string> result;
  for (int r = 0; r < size(); ++r) {
    const auto* row = static_cast<const char*>(all[r].data_ptr());
    result.emplace_back(row, static_cast<size_t>(lengths[r][0].item<int64_t>()));
  }
  return result;
}

std::shared_ptr<ProcessGroup> ProcessGroup::newGroup(const std::vector<int>& ranks) {
  // Every rank counts the call, member or not, so the next subgroup's keys
  // agree everywhere.
  const int index = impl_->subgroups++;
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  for (int r : ranks) {
    checkRank(r, "newGroup", "rank");
    if (seen[r]) throw ConfigError(fmt::format("newGroup: rank {} is listed twice", r));
    seen[r] = true;
  }
  if (ranks.empty()) throw ConfigError("newGroup: the list of ranks is empty");
  C10dGroupPtr mpiGroup;
  if (impl_->kind == Backend::kMpi) {
    // MPI makes a communicator collectively over the whole world: members
    // or not, every rank of the world takes part.
    if (!impl_->globalRanks.empty()) {
      throw ConfigError(
          "newGroup: MPI subgroups are made from the world group; call newGroup on the group "
          "initProcessGroup returned, with world ranks");
    }
    mpiGroup = makeC10dMpi(ranks);
  }
  const auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end()) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->kind = impl_->kind;
  impl->timeout = impl_->timeout;
  impl->debug = impl_->debug;
  impl->rank = static_cast<int>(me - ranks.begin());
  impl->size = static_cast<int>(ranks.size());
  for (int r : ranks) impl->globalRanks.push_back(globalRank(r));
  impl->store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("sub{}", index), impl_->store);
  if (mpiGroup) {
    impl->group = std::move(mpiGroup);
  } else {
    connect(*impl, environment_);
  }
  return std::make_shared<ProcessGroup>(environment_, std::move(impl));
}

std::shared_ptr<ProcessGroup> ProcessGroup::nodeGroup() {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(at::Device(impl_->device));
  const at::Tensor nodes = allGather(at::full({1}, environment_.nodeRank, longs)).cpu();
  std::vector<int64_t> order;  // node ids, by their first rank
  for (int r = 0; r < size(); ++r) {
    const int64_t node = nodes[r][0].item<int64_t>();
    if (std::find(order.begin(), order.end(), node) == order.end()) order.push_back(node);
  }
  std::shared_ptr<ProcessGroup> mine;
  for (int64_t node : order) {
    std::vector<int> members;
    for (int r = 0; r < size(); ++r) {
      if (nodes[r][0].item<int64_t>() == node) members.push_back(r);
    }
    if (auto group = newGroup(members)) mine = std::move(group);
  }
  return mine;
}

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroupAccess::processGroup(ProcessGroup& group) {
  ProcessGroup::Impl& impl = *group.impl_;
  std::lock_guard lock(impl.issueMutex);
  if (!impl.dispatcher) {
    impl.dispatcher = asProcessGroup(impl.group, impl.store, impl.rank, impl.size, impl.kind);
  }
  return impl.dispatcher;
}

bool ncclAvailable() { return c10dNcclAvailable(); }

bool ncclBuiltIn() { return c10dNcclBuiltIn(); }

bool mpiAvailable() { return c10dMpiAvailable(); }

namespace {

// The world of an MPI job: rank and size from MPI itself (as
// torch.distributed's mpi backend), the node-local rank from Open MPI's or
// MPICH's variables, the node from the host names the ranks gather.
std::shared_ptr<ProcessGroup> initMpi(Environment environment, ProcessGroupOptions options) {
  if (debugRequested(options)) {
    throw ConfigError(
        "debug collective checks need a job store for their Gloo helper group, which an MPI job "
        "has not; unset DDPRUN_DEBUG_COLLECTIVES (or debugChecks) for the mpi backend");
  }
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->kind = Backend::kMpi;
  impl->timeout = options.timeout;
  impl->group = makeC10dMpi({});
  impl->rank = impl->group->getRank();
  impl->size = impl->group->getSize();
  // Only the 2.x dispatcher needs a store; nothing is exchanged through it.
  impl->store = c10::make_intrusive<c10d::HashStore>();
  environment.distributed = impl->size > 1;
  environment.rank = impl->rank;
  environment.worldSize = impl->size;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    if (const char* value = std::getenv(name)) environment.localRank = std::atoi(value);
  }
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(name)) environment.localWorldSize = std::atoi(value);
  }
  auto group = std::make_shared<ProcessGroup>(environment, std::move(impl));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto hosts = group->allGatherBytes(host);
  std::vector<std::string> distinct;
  for (const auto& h : hosts) {
    if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
  }
  environment.nodeRank = static_cast<int>(
      std::find(distinct.begin(), distinct.end(), std::string(host)) - distinct.begin());
  ProcessGroupAccess::setEnvironment(*group, environment);
  return group;
}

}  // namespace

std::shared_ptr<ProcessGroup> initProcessGroup(ProcessGroupOptions options) {
  return initProcessGroup(Environment::detect(), options);
}

std::shared_ptr<ProcessGroup> initProcessGroup(const Environment& environment,
                                               ProcessGroupOptions options) {
  // As Python does at start-up: a write to a peer that vanished is an error
  // of the collective (Gloo reports it), not SIGPIPE killing this rank. A
  // handler the program installed is kept.
  struct sigaction pipe {};
  if (::sigaction(SIGPIPE, nullptr, &pipe) == 0 && pipe.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
  Backend kind = options.backend;
  if (kind == Backend::kMpi) return initMpi(environment, options);
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
  impl->timeout = options.timeout;
  impl->debug = debugRequested(options);
  impl->rank = environment.rank;
  impl->size = environment.worldSize;
  impl->store = connectJobStore(environment, groupPrefix, options.timeout);
  if (!impl->store) {
    // One process: the same c10d group over an in-process store.
    impl->store = c10::make_intrusive<c10d::HashStore>();
    impl->rank = 0;
    impl->size = 1;
  }
  connect(*impl, environment);
  auto group = std::make_shared<ProcessGroup>(environment, std::move(impl));
  reportProcessGroupFormed();
  return group;
}

}  // namespace ddprun::worker
