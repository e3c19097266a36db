#include "ddprun/agent/workers/run_directory.h"

#include <stdlib.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"

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

fs::path RunDirectory::created(const fs::path& relative) const {
  std::error_code ec;
  const fs::path wanted = root_ / relative;
  fs::create_directories(wanted, ec);
  if (!ec) return wanted;
  if (fallbackRoot_.empty()) {
    std::error_code ignored;
    try {
      fallbackRoot_ = makeUniqueDirectory(fs::temp_directory_path(ignored), "ddprun-logs-");
    } catch (const Error&) {
      throw Error(
          fmt::format("cannot create the log directory {}: {}", wanted.string(), ec.message()));
    }
    DDPRUN_WARN(
        "Cannot create the log directory {}: {}; this launch's later logs and error files go to "
        "{} instead.",
        wanted.string(), ec.message(), fallbackRoot_.string());
  }
  const fs::path instead = fallbackRoot_ / relative;
  std::error_code again;
  fs::create_directories(instead, again);
  if (again) {
    throw Error(fmt::format("cannot create the log directory {}: {}, nor {}: {}", wanted.string(),
                            ec.message(), instead.string(), again.message()));
  }
  return instead;
}

fs::path RunDirectory::attemptDir(int attempt) const {
  return created(fmt::format("attempt_{}", attempt));
}

fs::path RunDirectory::workerDir(int attempt, int localRank) const {
  return created(fs::path(fmt::format("attempt_{}", attempt)) / std::to_string(localRank));
}

}  // namespace ddprun::agent
