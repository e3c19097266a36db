#include "gpu_count.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

#include "ddprun/common/env.h"
#include "ddprun/common/parse.h"

namespace ddprun::launcher {

namespace {

// Devices found by NVML, or -1 when NVML cannot be used.
int nvmlDeviceCount() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return -1;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlShutdown"));
  int result = -1;
  unsigned n = 0;
  if (init && count && shutdown && init() == 0) {
    if (count(&n) == 0) result = static_cast<int>(n);
    shutdown();
  }
  ::dlclose(lib);
  return result;
}

// Devices the CUDA driver exposes (already filtered by
// CUDA_VISIBLE_DEVICES), or -1 when there is no driver.
int cudaDriverDeviceCount() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return -1;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  int n = -1;
  if (init && count && init(0) == 0 && count(&n) != 0) n = -1;
  ::dlclose(lib);
  return n;
}

}  // namespace

int countVisibleEntries(std::string_view value, int physical) {
  int count = 0;
  std::set<std::string> seen;
  for (std::string_view item : splitList(value)) {
    const std::string_view entry = trimSpaces(item);
    if (entry.empty()) break;
    if (entry.starts_with("GPU-") || entry.starts_with("MIG-")) {
      if (!seen.insert(std::string(entry)).second) break;
      ++count;
      continue;
    }
    const auto index = parseInteger(entry);
    if (!index || *index < 0 || *index >= physical || !seen.insert(std::to_string(*index)).second) {
      break;
    }
    ++count;
  }
  return count;
}

int countVisibleGpus() {
  const int physical = nvmlDeviceCount();
  if (physical < 0) return std::max(0, cudaDriverDeviceCount());
  const char* visible = std::getenv(env::kCudaVisibleDevices);
  if (visible == nullptr) return physical;
  return countVisibleEntries(visible, physical);
}

}  // namespace ddprun::launcher
