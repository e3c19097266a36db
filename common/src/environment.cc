#include "ddprun/common/environment.h"

#include <algorithm>
#include <cstdlib>

extern char** environ;

namespace ddprun {

std::map<std::string, std::string> environmentMap() {
  std::map<std::string, std::string> result;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) result[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return result;
}

std::vector<std::string> executableSearchPath() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> result;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, colon - start);
    result.push_back(dir.empty() ? "." : dir);
    start = colon + 1;
  }
  return result;
}

}  // namespace ddprun
