#include "gloo_backend.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "ddprun/common/error.h"
#include "ddprun/worker/gloo_store.h"
#include "tensor_description.h"

namespace ddprun::worker {

namespace {

// Calls `f(T{})` with the C++ type of `type`.
template <typename F>
void dispatch(at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat:
      return f(float{});
    case at::kDouble:
      return f(double{});
    case at::kInt:
      return f(std::int32_t{});
    case at::kLong:
      return f(std::int64_t{});
    case at::kChar:
      return f(std::int8_t{});
    case at::kByte:
    case at::kBool:
      return f(std::uint8_t{});
    default:
      throw ConfigError(fmt::format(
          "Gloo collectives support float32, float64, int8, uint8, bool, int32 and int64 "
          "tensors, not {}; convert the tensor with .to(torch::kFloat) first",
          dtypeName(type)));
  }
}

template <typename T>
gloo::AllreduceOptions::Func reduceFunction(ReduceOp op) {
  void (*fn)(void*, const void*, const void*, size_t) = nullptr;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      fn = &gloo::sum<T>;
      break;
    case ReduceOp::kMin:
      fn = &gloo::min<T>;
      break;
    case ReduceOp::kMax:
      fn = &gloo::max<T>;
      break;
  }
  return fn;
}

std::shared_ptr<gloo::transport::Device> createDevice(const Environment& environment) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
    attr.iface = iface;
  } else if (environment.worldSize == environment.localWorldSize) {
    attr.hostname = "127.0.0.1";  // every rank is on this node
  } else {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

class GlooBackend : public CollectiveBackend {
 public:
  GlooBackend(rendezvous::Store* store, const Environment& environment,
              std::chrono::milliseconds timeout)
      : rank_(environment.rank), size_(environment.worldSize), timeout_(timeout) {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(timeout);
    auto device = createDevice(environment);
    try {
      if (store == nullptr) {
        gloo::rendezvous::HashStore local;
        context->connectFullMesh(local, device);
      } else {
        GlooStore glooStore(*store, timeout);
        context->connectFullMesh(glooStore, device);
      }
    } catch (const gloo::Exception& e) {
      throw NetworkError(fmt::format(
          "rank {} could not connect Gloo to its {} peers: {} (check that every rank started "
          "and that GLOO_SOCKET_IFNAME names an interface the other nodes can reach)",
          rank_, size_ - 1, e.what()));
    }
    context_ = std::move(context);
    thread_ = std::thread([this] { run(); });
  }

  ~GlooBackend() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  Backend kind() const override { return Backend::kGloo; }
  std::string device() const override { return "cpu"; }

  void validate(const at::Tensor& tensor, const char* what) const override {
    if (!tensor.defined()) throw ConfigError(fmt::format("{}: the tensor is undefined", what));
    if (!tensor.device().is_cpu()) {
      throw ConfigError(fmt::format(
          "{}: the Gloo process group takes CPU tensors, got one on {}; use the nccl backend "
          "for CUDA tensors or move the tensor with .cpu()",
          what, tensor.device().str()));
    }
    if (!tensor.is_contiguous()) {
      throw ConfigError(
          fmt::format("{}: the tensor is not contiguous; call .contiguous() first", what));
    }
    dispatch(tensor.scalar_type(), [](auto) {});
  }

  std::shared_ptr<Work> allReduce(const at::Tensor& tensor, ReduceOp op) override {
    if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
      throw ConfigError(
          fmt::format("all_reduce: the average of an integer tensor ({}) is not "
                      "exact; reduce with kSum and divide yourself",
                      describeTensor(tensor)));
    }
    return enqueue([this, tensor, op](std::uint32_t tag) {
      dispatch(tensor.scalar_type(), [&](auto zero) {
        using T = decltype(zero);
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
        opts.setReduceFunction(reduceFunction<T>(op));
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      });
      if (op == ReduceOp::kAvg) tensor.div_(size_);
    });
  }

  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root) override {
    return enqueue([this, tensor, root](std::uint32_t tag) {
      dispatch(tensor.scalar_type(), [&](auto zero) {
        using T = decltype(zero);
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::broadcast(opts);
      });
    });
  }

  std::shared_ptr<Work> allGather(const at::Tensor& input, const at::Tensor& output) override {
    return enqueue([this, input, output](std::uint32_t tag) {
      dispatch(input.scalar_type(), [&](auto zero) {
        using T = decltype(zero);
        gloo::AllgatherOptions opts(context_);
        opts.setInput(static_cast<T*>(input.data_ptr()), static_cast<size_t>(input.numel()));
        opts.setOutput(static_cast<T*>(output.data_ptr()), static_cast<size_t>(output.numel()));
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allgather(opts);
      });
    });
  }

  std::shared_ptr<Work> barrier() override {
    return enqueue([this](std::uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  struct Task {
    std::uint64_t id = 0;
    std::function<void(std::uint32_t)> run;
    std::promise<void> done;
  };

  // A queued operation. wait() runs it on the waiting thread when it is
  // next in line and nothing else runs (the common synchronous call): one
  // thread hand-off less per call, which matters on a loaded machine.
  class QueuedWork : public Work {
   public:
    QueuedWork(GlooBackend& backend, std::uint64_t id, std::shared_future<void> done)
        : backend_(backend), id_(id), done_(std::move(done)) {}
    void wait() override {
      backend_.runIfNext(id_);
      done_.get();
    }

   private:
    GlooBackend& backend_;
    std::uint64_t id_;
    std::shared_future<void> done_;
  };

  std::shared_ptr<Work> enqueue(std::function<void(std::uint32_t)> run) {
    std::shared_ptr<Work> work;
    {
      std::lock_guard lock(mutex_);
      Task task{nextId_++, std::move(run), {}};
      work = std::make_shared<QueuedWork>(*this, task.id, task.done.get_future().share());
      queue_.push_back(std::move(task));
    }
    wake_.notify_all();
    return work;
  }

  // Operations run one at a time in issue order, so every rank gives them
  // the same tags.
  void runIfNext(std::uint64_t id) {
    std::unique_lock lock(mutex_);
    if (busy_ || queue_.empty() || queue_.front().id != id) return;
    runFront(lock);
  }

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !busy_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      runFront(lock);
    }
  }

  // Pops and runs the front task with `lock` released meanwhile.
  void runFront(std::unique_lock<std::mutex>& lock) {
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const std::uint32_t tag = nextTag_++;
    lock.unlock();
    try {
      task.run(tag);
      task.done.set_value();
    } catch (const gloo::Exception& e) {
      task.done.set_exception(translate(e));
    } catch (...) {
      task.done.set_exception(std::current_exception());
    }
    lock.lock();
    busy_ = false;
    wake_.notify_all();
  }

  std::exception_ptr translate(const gloo::Exception& e) const {
    std::string what = e.what();
    std::string message = fmt::format(
        "a Gloo collective on rank {} failed: {} (a peer failed, exited or stopped taking part "
        "within {} s; its own log says why)",
        rank_, what, timeout_.count() / 1000.0);
    if (what.find("Timed out") != std::string::npos) {
      return std::make_exception_ptr(TimeoutError(message));
    }
    return std::make_exception_ptr(NetworkError(message));
  }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool busy_ = false;
  std::uint64_t nextId_ = 0;
  std::uint32_t nextTag_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> makeGlooBackend(rendezvous::Store* store,
                                                   const Environment& environment,
                                                   std::chrono::milliseconds timeout) {
  return std::make_unique<GlooBackend>(store, environment, timeout);
}

}  // namespace ddprun::worker
