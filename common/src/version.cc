#include "ddprun/common/version.h"

#include <fmt/format.h>

#include "ddprun_version.h"

namespace ddprun {

std::string versionText(std::string_view program) {
  return fmt::format("{} {} (commit {})", program, DDPRUN_VERSION, DDPRUN_COMMIT);
}

}  // namespace ddprun
