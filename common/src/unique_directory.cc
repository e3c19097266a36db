#include "ddprun/common/unique_directory.h"

#include <stdlib.h>

#include <fmt/format.h>

#include <cerrno>

#include "ddprun/common/error.h"

namespace ddprun {

namespace fs = std::filesystem;

fs::path makeUniqueDirectory(const fs::path& parent, const std::string& prefix,
                             std::error_code& error) {
  std::string pattern = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    error = std::error_code(errno, std::generic_category());
    return {};
  }
  error.clear();
  return pattern;
}

fs::path makeUniqueDirectory(const fs::path& parent, const std::string& prefix) {
  std::error_code error;
  fs::path made = makeUniqueDirectory(parent, prefix, error);
  if (error) {
    const bool denied =
        error == std::errc::permission_denied || error == std::errc::read_only_file_system;
    throw Error(fmt::format(
        "cannot create a directory like {}: {}; {}", (parent / (prefix + "XXXXXX")).string(),
        error.message(),
        denied ? "give a writable --log_dir (or set TMPDIR)" : "check the disk and the path"));
  }
  return made;
}

bool diskFull(const std::error_code& error) {
  return error == std::errc::no_space_on_device ||
         (error.category() == std::generic_category() && error.value() == EDQUOT) ||
         (error.category() == std::system_category() && error.value() == EDQUOT);
}

fs::path makeTemporaryDirectory(const std::string& prefix) {
  std::error_code ignored;
  return makeUniqueDirectory(fs::temp_directory_path(ignored), prefix);
}

}  // namespace ddprun
