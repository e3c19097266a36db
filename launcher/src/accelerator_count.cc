#include "accelerator_count.h"

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "ddprun/common/parse.h"
#include "ddprun/common/text_file.h"
#include "gpu_count.h"

namespace ddprun::launcher {

namespace fs = std::filesystem;

namespace {

// A visibility list applied to `count` devices (CUDA's rule: up to the
// first invalid entry); unset leaves the count.
int visible(const char* variable, int count) {
  const char* value = std::getenv(variable);
  return value == nullptr ? count : countVisibleEntries(value, count);
}

}  // namespace

int countAmdGpus(const fs::path& sys) {
  std::error_code ec;
  int gpus = 0;
  for (const auto& node : fs::directory_iterator(sys / "class/kfd/kfd/topology/nodes", ec)) {
    std::ifstream properties(node.path() / "properties");
    std::string name;
    long long value = 0;
    while (properties >> name >> value) {
      if (name == "simd_count" && value > 0) ++gpus;  // CPU nodes have none
    }
  }
  if (gpus == 0) return 0;
  return visible("HIP_VISIBLE_DEVICES", visible("ROCR_VISIBLE_DEVICES", gpus));
}

int countIntelXpus(const fs::path& sys) {
  std::error_code ec;
  static const std::regex kCard("card[0-9]+");
  int cards = 0;
  for (const auto& entry : fs::directory_iterator(sys / "class/drm", ec)) {
    if (!std::regex_match(entry.path().filename().string(), kCard)) continue;
    const fs::path device = entry.path() / "device";
    if (readFirstLine(device / "vendor") != "0x8086") continue;
    const std::string driver = fs::read_symlink(device / "driver", ec).filename().string();
    if (ec || (driver != "i915" && driver != "xe")) continue;
    ++cards;
  }
  const char* mask = std::getenv("ZE_AFFINITY_MASK");
  if (cards == 0 || mask == nullptr) return cards;
  std::set<long long> roots;
  for (std::string_view item : splitList(mask)) {
    const std::string_view entry = trimSpaces(item);
    const auto root = parseInteger(entry.substr(0, entry.find('.')));
    if (!root || *root < 0 || *root >= cards) break;
    roots.insert(*root);
  }
  return static_cast<int>(roots.size());
}

}  // namespace ddprun::launcher
