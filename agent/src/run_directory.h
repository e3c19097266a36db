// RunDirectory: where a run's per-worker files live:
//   <base>/<run_id>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
// <base> is --log_dir, or a temporary directory removed when the run ends.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ddprun::agent {

class RunDirectory {
 public:
  // Throws ddprun::Error when the directory cannot be created.
  RunDirectory(const std::optional<std::filesystem::path>& logDir, const std::string& runId);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // Creates (and empties of a stale error.json) the worker's directory.
  std::filesystem::path workerDir(int attempt, int localRank) const;
  const std::filesystem::path& root() const { return root_; }
  bool temporary() const { return temporary_; }

 private:
  std::filesystem::path root_;
  bool temporary_ = false;
};

}  // namespace ddprun::agent
