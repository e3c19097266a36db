#include "run_directory.h"

#include <stdlib.h>

#include <fmt/format.h>

#include "ddprun/common/error.h"

namespace ddprun::agent {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::optional<fs::path>& logDir, const std::string& runId) {
  std::error_code ec;
  if (logDir) {
    root_ = *logDir / runId;
  } else {
    std::string pattern = (fs::temp_directory_path(ec) / "ddprun-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error(
          fmt::format("cannot create a temporary directory like {}; set TMPDIR or "
                      "pass --log_dir",
                      pattern));
    }
    root_ = fs::path(pattern) / runId;
    temporary_ = true;
  }
  fs::create_directories(root_, ec);
  if (ec) {
    throw Error(
        fmt::format("cannot create the log directory {}: {}", root_.string(), ec.message()));
  }
}

RunDirectory::~RunDirectory() {
  if (temporary_) {
    std::error_code ignored;
    fs::remove_all(root_.parent_path(), ignored);
  }
}

fs::path RunDirectory::workerDir(int attempt, int localRank) const {
  const fs::path dir = root_ / fmt::format("attempt_{}", attempt) / std::to_string(localRank);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw Error(fmt::format("cannot create the log directory {}: {}", dir.string(), ec.message()));
  }
  fs::remove(dir / "error.json", ec);  // never report a previous run's error
  return dir;
}

}  // namespace ddprun::agent
