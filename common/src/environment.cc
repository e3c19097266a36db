#include "ddprun/common/environment.h"

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

}  // namespace ddprun
