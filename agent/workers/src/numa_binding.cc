#include "ddprun/agent/workers/numa_binding.h"

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "ddprun/common/logging.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/text_file.h"

namespace ddprun::agent {

namespace fs = std::filesystem;

namespace {

int readInt(const fs::path& path, int fallback) {
  const auto value = parseInteger(readFirstLine(path));
  return value ? static_cast<int>(*value) : fallback;
}

// NVIDIA display (0x0300xx) and 3D (0x0302xx) controllers, by PCI address.
std::vector<std::string> nvidiaGpus(const fs::path& sys) {
  std::vector<std::string> gpus;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(sys / "bus/pci/devices", ec)) {
    const std::string vendor = readFirstLine(entry.path() / "vendor");
    const std::string cls = readFirstLine(entry.path() / "class");
    if (vendor == "0x10de" && (cls.starts_with("0x0300") || cls.starts_with("0x0302"))) {
      gpus.push_back(entry.path().filename().string());
    }
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& allowed) {
  std::vector<int> out;
  for (int cpu : a) {
    if (std::find(allowed.begin(), allowed.end(), cpu) != allowed.end()) out.push_back(cpu);
  }
  return out;
}

struct Topology {
  fs::path sys;
  std::vector<int> allowed;

  std::vector<int> nodeCpus(int node) const {
    return intersect(
        parseCpuList(readFirstLine(sys / fmt::format("devices/system/node/node{}/cpulist", node))),
        allowed);
  }
  fs::path cpuDir(int cpu) const { return sys / fmt::format("devices/system/cpu/cpu{}", cpu); }
  int package(int cpu) const { return readInt(cpuDir(cpu) / "topology/physical_package_id", 0); }
  int core(int cpu) const {  // the lowest sibling names the physical core
    const auto siblings =
        parseCpuList(readFirstLine(cpuDir(cpu) / "topology/thread_siblings_list"));
    return siblings.empty() ? cpu : *std::min_element(siblings.begin(), siblings.end());
  }
  // The CPUs sharing the highest-level unified or data cache with `cpu`.
  std::vector<int> cacheGroup(int cpu) const {
    int bestLevel = -1;
    std::vector<int> best = {cpu};
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(cpuDir(cpu) / "cache", ec)) {
      const std::string type = readFirstLine(entry.path() / "type");
      const int level = readInt(entry.path() / "level", -1);
      if ((type == "Unified" || type == "Data") && level > bestLevel) {
        bestLevel = level;
        best = parseCpuList(readFirstLine(entry.path() / "shared_cpu_list"));
      }
    }
    return intersect(best, allowed);
  }
};

}  // namespace

std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  for (std::string_view part : splitList(text)) {
    const std::size_t dash = part.find('-');
    const auto first = parseInteger(part.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : parseInteger(part.substr(dash + 1));
    if (first && last && *first >= 0 && *last >= *first && *last < 65536) {
      for (long long cpu = *first; cpu <= *last; ++cpu) cpus.push_back(static_cast<int>(cpu));
    }
  }
  return cpus;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

NumaPlan planNumaBinding(const std::string& mode, int nprocPerNode,
                         const std::optional<std::string>& visibleDevices,
                         const std::vector<int>& allowedCpus, const fs::path& sysRoot) {
  NumaPlan plan;
  const Topology topo{sysRoot, allowedCpus};
  const auto physical = nvidiaGpus(sysRoot);
  if (physical.empty()) {
    plan.notice = fmt::format("--numa_binding={} has no effect: no NVIDIA GPU on this node", mode);
    return plan;
  }
  const auto nodes = parseCpuList(readFirstLine(sysRoot / "devices/system/node/possible"));
  if (nodes.size() < 2) {
    plan.notice =
        fmt::format("--numa_binding={} has no effect: this node has a single NUMA node", mode);
    return plan;
  }
  // The physical GPU of each visible CUDA device.
  std::vector<int> visible;
  if (visibleDevices) {
    for (std::string_view entry : splitList(*visibleDevices)) {
      const auto index = parseInteger(entry);
      if (!index || *index < 0 || *index >= static_cast<long long>(physical.size())) {
        plan.notice = fmt::format(
            "--numa_binding={} has no effect: CUDA_VISIBLE_DEVICES={} does not list GPUs by "
            "index (0 to {})",
            mode, *visibleDevices, physical.size() - 1);
        return plan;
      }
      visible.push_back(static_cast<int>(*index));
    }
  } else {
    for (int i = 0; i < static_cast<int>(physical.size()); ++i) visible.push_back(i);
  }
  if (nprocPerNode > static_cast<int>(visible.size())) {
    plan.notice = fmt::format(
        "--numa_binding={} has no effect: {} workers but {} visible GPUs (binding follows one "
        "GPU per worker)",
        mode, nprocPerNode, visible.size());
    return plan;
  }
  auto nodeOf = [&](int gpu) {
    return std::max(0, readInt(sysRoot / "bus/pci/devices" /
                                   physical[static_cast<std::size_t>(gpu)] / "numa_node",
                               0));
  };
  for (int localRank = 0; localRank < nprocPerNode; ++localRank) {
    const int gpu = visible[static_cast<std::size_t>(localRank)];
    const int node = nodeOf(gpu);
    // The node's visible GPUs, in index order, and this one's place among them.
    std::vector<int> peers;
    for (int other : visible) {
      if (nodeOf(other) == node) peers.push_back(other);
    }
    const auto place =
        static_cast<std::size_t>(std::find(peers.begin(), peers.end(), gpu) - peers.begin());
    const auto nodeCpus = topo.nodeCpus(node);
    CpuPlacement placement;
    placement.memoryNode = node;
    if (mode == "node") {
      placement.cpus = nodeCpus;
    } else if (mode == "socket") {
      const int package = nodeCpus.empty() ? 0 : topo.package(nodeCpus.front());
      for (int other : nodes) {
        const auto cpus = topo.nodeCpus(other);
        if (!cpus.empty() && topo.package(cpus.front()) == package) {
          placement.cpus.insert(placement.cpus.end(), cpus.begin(), cpus.end());
        }
      }
      std::sort(placement.cpus.begin(), placement.cpus.end());
    } else if (mode == "exclusive") {
      std::map<int, std::vector<int>> cores;  // physical core -> its CPUs
      for (int cpu : nodeCpus) cores[topo.core(cpu)].push_back(cpu);
      const std::size_t share = cores.size() / peers.size();
      const std::size_t extra = cores.size() % peers.size();
      if (share == 0) {
        plan.notice = fmt::format(
            "--numa_binding=exclusive has no effect: NUMA node {} has {} cores for {} GPUs", node,
            cores.size(), peers.size());
        plan.placements.clear();
        return plan;
      }
      const std::size_t first = place * share + std::min(place, extra);
      const std::size_t count = share + (place < extra ? 1 : 0);
      std::size_t i = 0;
      for (const auto& [core, cpus] : cores) {
        if (i >= first && i < first + count) {
          placement.cpus.insert(placement.cpus.end(), cpus.begin(), cpus.end());
        }
        ++i;
      }
      std::sort(placement.cpus.begin(), placement.cpus.end());
    } else {  // core-complex
      std::set<std::vector<int>> groups;
      for (int cpu : nodeCpus) {
        auto group = intersect(topo.cacheGroup(cpu), nodeCpus);
        std::sort(group.begin(), group.end());
        if (!group.empty()) groups.insert(group);
      }
      std::vector<std::vector<int>> ordered(groups.begin(), groups.end());
      std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
        return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
      });
      if (!ordered.empty()) placement.cpus = ordered[place % ordered.size()];
    }
    if (placement.cpus.empty()) {
      plan.notice = fmt::format(
          "--numa_binding={} has no effect: NUMA node {} has none of the CPUs ddprun may use", mode,
          node);
      plan.placements.clear();
      return plan;
    }
    plan.placements.push_back(std::move(placement));
  }
  return plan;
}

std::vector<CpuPlacement> planNumaForThisNode(const std::string& mode, int nprocPerNode,
                                              const std::map<std::string, std::string>& env) {
  cpu_set_t set;
  std::vector<int> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
    }
  }
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  NumaPlan plan = planNumaBinding(
      mode, nprocPerNode,
      visible == env.end() ? std::nullopt : std::optional<std::string>(visible->second), allowed);
  if (plan.placements.empty()) {
    std::cerr << "ddprun: notice: " << plan.notice << "\n";
    return {};
  }
  for (std::size_t i = 0; i < plan.placements.size(); ++i) {
    DDPRUN_INFO("Local rank {} is bound to CPUs {} and prefers memory of NUMA node {}.", i,
                formatCpuList(plan.placements[i].cpus), plan.placements[i].memoryNode);
  }
  return std::move(plan.placements);
}

}  // namespace ddprun::agent
