#include "ddprun/agent/workers/run_directory.h"

#include <fmt/format.h>

#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/unique_directory.h"

namespace ddprun::agent {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::optional<fs::path>& logDir, const std::string& runId,
                           bool keep) {
  std::error_code ec;
  fs::path base;
  if (logDir) {
    base = *logDir;
    fs::create_directories(base, ec);
    if (ec && !diskFull(ec)) {
      throw Error(fmt::format("cannot create the log directory {}: {}; give a writable --log_dir",
                              base.string(), ec.message()));
    }
  } else {
    base = makeTemporaryDirectory("ddprun_");
    if (!keep) removeAtExit_ = base;
  }
  if (!ec) root_ = makeUniqueDirectory(base, runId + "_", ec);
  if (ec && diskFull(ec)) {
    // A full log disk must not keep this node out of its job (an agent a
    // scheduler starts again on it, a requeued job): as for a restart's
    // files, the launch's go to a directory of its own under TMPDIR.
    root_ = makeUniqueDirectory(makeTemporaryDirectory("ddprun-logs-"), runId + "_");
    DDPRUN_WARN(
        "Cannot create this launch's log directory in {}: {}; its logs and error files go to {} "
        "instead.",
        base.string(), ec.message(), root_.string());
  } else if (ec) {
    root_ = makeUniqueDirectory(base, runId + "_");  // throws, saying what to do
  }
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
    try {
      fallbackRoot_ = makeTemporaryDirectory("ddprun-logs-");
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
