#include "ddprun/agent/workers/run_directory.h"

#include <stdlib.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"

namespace ddprun::agent {

namespace fs = std::filesystem;

namespace {

// A new directory named `prefix` + 6 random characters (mode 0700).
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

}  // namespace

RunDirectory::RunDirectory(const std::optional<fs::path>& logDir, const std::string& runId,
                           bool keep) {
  std::error_code ec;
  fs::path base;
  if (logDir) {
    base = *logDir;
    fs::create_directories(base, ec);
    if (ec) {
      throw Error(fmt::format("cannot create the log directory {}: {}; give a writable --log_dir",
                              base.string(), ec.message()));
    }
  } else {
    base = makeUniqueDirectory(fs::temp_directory_path(ec), "ddprun_");
    if (!keep) removeAtExit_ = base;
  }
  root_ = makeUniqueDirectory(base, runId + "_");
}

RunDirectory::~RunDirectory() {
  if (!removeAtExit_.empty()) {
    std::error_code ignored;
    fs::remove_all(removeAtExit_, ignored);
  }
}

fs::path RunDirectory::attemptDir(int attempt) const {
  const fs::path dir = root_ / fmt::format("attempt_{}", attempt);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw Error(fmt::format("cannot create the log directory {}: {}", dir.string(), ec.message()));
  }
  return dir;
}

fs::path RunDirectory::workerDir(int attempt, int localRank) const {
  const fs::path dir = attemptDir(attempt) / std::to_string(localRank);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw Error(fmt::format("cannot create the log directory {}: {}", dir.string(), ec.message()));
  }
  return dir;
}

}  // namespace ddprun::agent
