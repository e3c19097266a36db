// scratch(): the running test's folder for scripts, logs and checkpoints,
// <tmp>/ddprun-it-<pid>/<suite>/<test>.
//
// Per test process, because ctest runs the PyTorch 1.13 and current copies
// of a test at the same time. Emptied at its first use in the process (an
// earlier process with the same, recycled pid may have left files there),
// the same folder on later calls in the test. The process's folder is
// removed when the process ends with every test passed, and kept after a
// failure for the post-mortem. scratch("name"): a folder in it, created.
// Call it from the test's own thread.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <system_error>

namespace ddprun::harness {

inline std::filesystem::path scratch(const std::string& subfolder = "") {
  namespace fs = std::filesystem;
  struct ProcessFolder {
    pid_t owner = ::getpid();
    fs::path path = fs::path(::testing::TempDir()) / ("ddprun-it-" + std::to_string(owner));
    std::set<fs::path> emptied;
    ~ProcessFolder() {
      // A forked child that exits normally runs this too: not its folder.
      std::error_code ignored;
      if (::getpid() == owner && ::testing::UnitTest::GetInstance()->Passed())
        fs::remove_all(path, ignored);
    }
  };
  static ProcessFolder folder;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = folder.path / info->test_suite_name() / info->name();
  if (folder.emptied.insert(dir).second) fs::remove_all(dir);
  fs::create_directories(dir / subfolder);
  return subfolder.empty() ? dir : dir / subfolder;
}

}  // namespace ddprun::harness
