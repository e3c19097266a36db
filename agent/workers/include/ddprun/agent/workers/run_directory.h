// RunDirectory: where one launch's per-worker files live:
//   <base>/<run_id>_<random>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
//   <base>/<run_id>_<random>/attempt_<n>/flight_recorder/rank_<global rank>
// <base> is --log_dir, or a new temporary directory. The <run_id>_<random>
// directory is created new (mkdtemp, mode 0700) by every launch, so a second
// launch with the same run id (a requeued job) never touches the first one's
// files, and nothing planted in a shared <base> is followed: everything below
// it is this launch's own.
//
// Without --log_dir the temporary base is removed at exit unless `keep`
// (redirects or tee wrote files there, which the user must be able to read).
//
// A full disk must not end a job that could train on: when an attempt's or
// a worker's directory cannot be created under the launch's directory (no
// space, no inodes), it is made under a private temporary directory
// instead (mkdtemp, "ddprun-logs-", kept at exit: it holds logs), with one
// warning that says where; only when that fails too is it an error. The
// same goes for the launch's own directory when --log_dir's disk is full
// (no space, no inodes, over quota) as ddprun starts; any other reason it
// cannot be made (a path ddprun may not write) is an error.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ddprun::agent {

// Where PyTorch's flight recorder dumps an attempt's ranks
// (<attempt dir>/flight_recorder/rank_<global rank>; FlightRecorderSetup).
inline std::filesystem::path flightRecorderDir(const std::filesystem::path& attemptDir) {
  return attemptDir / "flight_recorder";
}

class RunDirectory {
 public:
  // Throws ddprun::Error when the directory cannot be created.
  RunDirectory(const std::optional<std::filesystem::path>& logDir, const std::string& runId,
               bool keep);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // The attempt's directory, created on first use.
  std::filesystem::path attemptDir(int attempt) const;
  // Creates the worker's directory.
  std::filesystem::path workerDir(int attempt, int localRank) const;
  const std::filesystem::path& root() const { return root_; }
  // True when the files are removed at exit.
  bool temporary() const { return !removeAtExit_.empty(); }

 private:
  // `relative` (to root_) created, or under the fallback root when it
  // cannot be; throws ddprun::Error when neither can.
  std::filesystem::path created(const std::filesystem::path& relative) const;

  std::filesystem::path root_;
  std::filesystem::path removeAtExit_;          // empty: kept
  mutable std::filesystem::path fallbackRoot_;  // made when root_'s disk first fails
};

}  // namespace ddprun::agent
