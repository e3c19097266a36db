#include <ATen/Context.h>
#include <fmt/format.h>

#include "c10d_group.h"
#include "ddprun/common/error.h"
#include "error_text.h"

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddprun::worker {

c10::intrusive_ptr<c10d::ProcessGroup> asProcessGroup(const C10dGroupPtr& group,
                                                      const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size, Backend kind) {
#if TORCH_VERSION_MAJOR >= 2
  auto dispatcher = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  using Type = c10d::ProcessGroup::BackendType;
  const Type type = kind == Backend::kNccl  ? Type::NCCL
                    : kind == Backend::kMpi ? Type::MPI
                                            : Type::GLOO;
  dispatcher->setBackend(kind == Backend::kNccl ? c10::DeviceType::CUDA : c10::DeviceType::CPU,
                         type, group);
  dispatcher->setDefaultBackend(type);
  return dispatcher;
#else
  (void)store, (void)rank, (void)size, (void)kind;
  return group;
#endif
}

bool c10dNcclAvailable() {
#ifdef USE_C10D_NCCL
  return at::hasCUDA() && c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

bool c10dNcclBuiltIn() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

#ifdef USE_C10D_NCCL
namespace {

template <typename Group>
void bindAndConnect(Group& group, const at::Device& device, int rank, int size) {
  if constexpr (requires {
                  group.setBoundDeviceId(device);
                  group.eagerConnectSingleDevice(device);
                }) {
    group.setBoundDeviceId(device);
    try {
      group.eagerConnectSingleDevice(device);
    } catch (const std::exception& e) {
      rethrowCollectiveError(e, rank, size, "creating the NCCL communicator");
    }
  }
}

}  // namespace
#endif

C10dGroupPtr makeC10dNccl(const c10::intrusive_ptr<c10d::Store>& store,
                          const Environment& environment, int rank, int size,
                          std::chrono::milliseconds timeout, std::string& device) {
#ifdef USE_C10D_NCCL
  const int index = environment.deviceIndex(c10::cuda::device_count());
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  device = fmt::format("cuda:{}", index);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // As Python's init_process_group(device_id=...): the group is bound to
  // this rank's device and its communicator made now (every rank has
  // arrived: awaitGroupArrival), so a failing NCCL set-up is an error of
  // initProcessGroup rather than of the first collective, and subgroups can
  // be split from it. Where the LibTorch has these calls (2.13 and 2.14 do).
  bindAndConnect(*group, at::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)),
                 rank, size);
  return group;
#else
  (void)store, (void)environment, (void)rank, (void)size, (void)timeout, (void)device;
  throw ConfigError(
      "the linked LibTorch has no NCCL (a CPU build); link a CUDA build of LibTorch for the "
      "nccl backend, or use gloo");
#endif
}

}  // namespace ddprun::worker
