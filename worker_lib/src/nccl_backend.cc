#include "nccl_backend.h"

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "ddprun/common/error.h"
#include "ddprun/rendezvous/store.h"
#include "tensor_description.h"

#ifdef DDPRUN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddprun::worker {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's state is polled (its non-blocking API has no completion callback);
// the interval is short next to any collective worth waiting for.
constexpr auto kPollInterval = std::chrono::microseconds(200);

void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw NetworkError(fmt::format("{} failed: {}", what, cudaGetErrorString(status)));
  }
}

ncclDataType_t ncclType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    default:
      throw ConfigError(
          fmt::format("NCCL collectives do not support {} tensors; convert the "
                      "tensor with .to(torch::kFloat) first",
                      dtypeName(type)));
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

class NcclBackend;

class NcclWork : public Work {
 public:
  NcclWork(NcclBackend& backend, cudaEvent_t event, Clock::time_point deadline)
      : backend_(backend), event_(event), deadline_(deadline) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  void wait() override;

 private:
  NcclBackend& backend_;
  cudaEvent_t event_;
  Clock::time_point deadline_;
};

class NcclBackend : public CollectiveBackend {
 public:
  NcclBackend(rendezvous::Store* store, const Environment& environment,
              std::chrono::milliseconds timeout)
      : rank_(environment.rank), size_(environment.worldSize), timeout_(timeout) {
    device_ = environment.deviceIndex(cudaDeviceCount());
    if (device_ < 0) throw ConfigError("the nccl backend needs a CUDA device, and none is visible");
    checkCuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    if (rank_ == 0) {
      checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      if (store) store->set("nccl/unique_id", std::string_view(id.internal, sizeof(id.internal)));
    } else {
      const std::string bytes = store->get("nccl/unique_id", timeout);
      if (bytes.size() != sizeof(id.internal)) {
        throw ProtocolError("the NCCL unique id in the store has the wrong size");
      }
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto deadline = Clock::now() + timeout;
    checkNccl(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
    settle("creating the NCCL communicator", deadline);
    checkCuda(cudaMalloc(&barrierBuffer_, sizeof(float)), "cudaMalloc");
  }

  ~NcclBackend() override {
    if (barrierBuffer_ != nullptr) cudaFree(barrierBuffer_);
    if (comm_ == nullptr) return;
    if (aborted_) return;
    ncclCommDestroy(comm_);
  }

  Backend kind() const override { return Backend::kNccl; }
  std::string device() const override { return fmt::format("cuda:{}", device_); }

  void validate(const at::Tensor& tensor, const char* what) const override {
    if (!tensor.defined()) throw ConfigError(fmt::format("{}: the tensor is undefined", what));
    if (!tensor.is_cuda() || tensor.device().index() != device_) {
      throw ConfigError(fmt::format(
          "{}: this rank's NCCL process group works on cuda:{}, got a tensor on {}; move it "
          "with .to(torch::Device(\"cuda:{}\"))",
          what, device_, tensor.device().str(), device_));
    }
    if (!tensor.is_contiguous()) {
      throw ConfigError(
          fmt::format("{}: the tensor is not contiguous; call .contiguous() first", what));
    }
    ncclType(tensor.scalar_type());
  }

  std::shared_ptr<Work> allReduce(const at::Tensor& tensor, ReduceOp op) override {
    return launch("ncclAllReduce", [&](cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                           ncclType(tensor.scalar_type()), ncclOp(op), comm_, stream);
    });
  }

  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root) override {
    return launch("ncclBroadcast", [&](cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                           ncclType(tensor.scalar_type()), root, comm_, stream);
    });
  }

  std::shared_ptr<Work> allGather(const at::Tensor& input, const at::Tensor& output) override {
    return launch("ncclAllGather", [&](cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                           ncclType(input.scalar_type()), comm_, stream);
    });
  }

  std::shared_ptr<Work> barrier() override {
    return launch("barrier", [&](cudaStream_t stream) {
      return ncclAllReduce(barrierBuffer_, barrierBuffer_, 1, ncclFloat32, ncclSum, comm_, stream);
    });
  }

  // Waits until the communicator has no operation in progress; aborts it
  // and throws on an error or at the deadline.
  void settle(const char* what, Clock::time_point deadline) {
    while (asyncState(what) == ncclInProgress) {
      if (Clock::now() >= deadline) timeOut(what);
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  // Called by NcclWork::wait() while its event is pending.
  void checkHealth(const char* what, Clock::time_point deadline) {
    asyncState(what);
    if (Clock::now() >= deadline) timeOut(what);
  }

 private:
  // ncclSuccess or ncclInProgress; aborts the communicator and throws on an
  // error.
  ncclResult_t asyncState(const char* what) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) fail(what, state);
    return state;
  }

  template <typename Launch>
  std::shared_ptr<Work> launch(const char* what, Launch&& call) {
    std::lock_guard lock(mutex_);
    if (aborted_) throw NetworkError("the NCCL communicator was aborted after an earlier failure");
    checkCuda(cudaSetDevice(device_), "cudaSetDevice");
    const cudaStream_t stream = currentStream();
    const auto deadline = Clock::now() + timeout_;
    checkNccl(call(stream), what);
    settle(what, deadline);
    cudaEvent_t event;
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    checkCuda(cudaEventRecord(event, stream), "cudaEventRecord");
    return std::make_shared<NcclWork>(*this, event, deadline);
  }

  cudaStream_t currentStream() const {
#ifdef DDPRUN_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
#else
    return nullptr;  // the legacy default stream, LibTorch's default
#endif
  }

  void checkNccl(ncclResult_t result, const char* what) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    fail(what, result);
  }

  [[noreturn]] void fail(const char* what, ncclResult_t result) {
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    abort();
    throw NetworkError(fmt::format(
        "{} on rank {} failed: {}{}{} (a peer may have failed; the communicator was aborted)", what,
        rank_, ncclGetErrorString(result), last && *last ? ": " : "", last ? last : ""));
  }

  [[noreturn]] void timeOut(const char* what) {
    abort();
    throw TimeoutError(fmt::format(
        "{} on rank {} did not complete within {} s: a peer failed, exited or stopped taking "
        "part (its own log says why); the NCCL communicator was aborted",
        what, rank_, timeout_.count() / 1000.0));
  }

  void abort() {
    if (comm_ != nullptr && !aborted_) {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

  int rank_;
  int size_;
  int device_ = -1;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  void* barrierBuffer_ = nullptr;
  std::mutex mutex_;
};

void NcclWork::wait() {
  for (;;) {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) checkCuda(status, "waiting for an NCCL collective");
    backend_.checkHealth("an NCCL collective", deadline_);
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<CollectiveBackend> makeNcclBackend(rendezvous::Store* store,
                                                   const Environment& environment,
                                                   std::chrono::milliseconds timeout) {
  return std::make_unique<NcclBackend>(store, environment, timeout);
}

}  // namespace ddprun::worker
