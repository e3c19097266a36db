// NUMA binding (--numa_binding): which CPUs and memory node each worker
// gets, from the GPU it uses and the machine's topology in sysfs.
//
// The worker of local rank r uses CUDA device r, i.e. the r-th entry of
// CUDA_VISIBLE_DEVICES (or physical GPU r). Physical GPUs are the NVIDIA PCI
// display/3D controllers in PCI bus order (nvidia-smi's and NVML's order;
// CUDA's is the same with CUDA_DEVICE_ORDER=PCI_BUS_ID). A GPU's NUMA node is
// /sys/bus/pci/devices/<address>/numa_node. As torch.numa.binding does:
//   node          the CPUs of the GPU's NUMA node;
//   socket        the CPUs of every NUMA node on the same physical package;
//   exclusive     the node's physical cores split evenly among the visible
//                 GPUs on that node (lower GPU indices get the remainder);
//   core-complex  the CPUs sharing one last-level cache of the node, the
//                 GPU's index among the node's GPUs choosing which.
// Every set is intersected with the agent's own affinity. Memory: the GPU's
// node is the preferred node (MPOL_PREFERRED), so allocations stay local
// while it has room. Applied between fork and exec (WorkerProcess).
//
// When binding cannot apply (no NVIDIA GPU, a single NUMA node, GPUs named
// by UUID) the plan is empty and `notice` says why, in one line.
//
// Thread-safety: pure functions over a sysfs root (tests pass a fake one).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/agent/workers/worker_process.h"

namespace ddprun::agent {

struct NumaPlan {
  std::vector<CpuPlacement> placements;  // one per local rank, or empty
  std::string notice;                    // why there is no plan
};

// `mode`: node, socket, exclusive or core-complex. `visibleDevices`: the
// value of CUDA_VISIBLE_DEVICES, nullopt when unset. `allowedCpus`: the
// agent's affinity.
NumaPlan planNumaBinding(const std::string& mode, int nprocPerNode,
                         const std::optional<std::string>& visibleDevices,
                         const std::vector<int>& allowedCpus,
                         const std::filesystem::path& sysRoot = "/sys");

// --numa_binding for this process: the plan for its affinity and the
// environment's CUDA_VISIBLE_DEVICES, each placement logged; empty (with the
// notice said on stderr) when there is none.
std::vector<CpuPlacement> planNumaForThisNode(const std::string& mode, int nprocPerNode,
                                              const std::map<std::string, std::string>& env);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; malformed parts are skipped.
std::vector<int> parseCpuList(const std::string& text);
// {0,1,2,3,8} -> "0-3,8".
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace ddprun::agent
