// Counting the accelerators other than NVIDIA GPUs that --nproc_per_node
// can mean (torchrun 2.14 counts them through torch.accelerator; ddprun
// reads the kernel's sysfs instead, so it needs neither torch nor a vendor
// runtime): AMD GPUs from the KFD topology (ROCm's own source), Intel GPUs
// (XPU) from the DRM devices bound to the i915 or xe driver. Each honours
// its runtime's visibility variable the way that runtime does.
//
// Thread-safety: free functions.
#pragma once

#include <filesystem>

namespace ddprun::launcher {

// GPU nodes (simd_count > 0) under SYS/class/kfd/kfd/topology/nodes, after
// ROCR_VISIBLE_DEVICES and then HIP_VISIBLE_DEVICES (each a list of
// indices or UUIDs, taken up to the first invalid entry, as CUDA's).
int countAmdGpus(const std::filesystem::path& sys = "/sys");

// DRM cards (SYS/class/drm/cardN) of vendor 0x8086 bound to i915 or xe,
// after ZE_AFFINITY_MASK (its distinct root devices: "0,1.0,1.1" is 2).
int countIntelXpus(const std::filesystem::path& sys = "/sys");

}  // namespace ddprun::launcher
