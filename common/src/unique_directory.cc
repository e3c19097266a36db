#include "ddprun/common/unique_directory.h"

#include <stdlib.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"

namespace ddprun {

namespace fs = std::filesystem;

fs::path makeUniqueDirectory(const fs::path& parent, const std::string& prefix) {
  std::string pattern = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(
        fmt::format("cannot create a directory like {}: {}; {}", pattern, std::strerror(errno),
                    errno == EACCES || errno == EROFS ? "give a writable --log_dir (or set TMPDIR)"
                                                      : "check the disk and the path"));
  }
  return pattern;
}

fs::path makeTemporaryDirectory(const std::string& prefix) {
  std::error_code ignored;
  return makeUniqueDirectory(fs::temp_directory_path(ignored), prefix);
}

}  // namespace ddprun
