// Counting the GPUs a worker group may use, without linking CUDA: the
// driver's NVML (or, failing that, the CUDA driver API) is loaded with
// dlopen, and CUDA_VISIBLE_DEVICES is honoured as CUDA honours it.
//
// Thread-safety: free functions.
#pragma once

#include <string_view>

namespace ddprun::launcher {

// GPUs visible to this process; 0 when there is no driver or no device.
int countVisibleGpus();

// How many devices CUDA would expose for a CUDA_VISIBLE_DEVICES value, out
// of `physical` devices: entries are taken in order until the first one
// that is empty, out of range or malformed (CUDA's rule). "GPU-..." and
// "MIG-..." UUIDs count as valid.
int countVisibleEntries(std::string_view value, int physical);

}  // namespace ddprun::launcher
