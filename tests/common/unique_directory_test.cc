#include "ddprun/common/unique_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "ddprun/common/error.h"

namespace {

namespace fs = std::filesystem;

TEST(UniqueDirectory, EachCallMakesANewPrivateDirectory) {
  const fs::path parent =
      fs::temp_directory_path() / ("ddprun-unique-" + std::to_string(::getpid()));
  fs::remove_all(parent);
  fs::create_directories(parent);
  const fs::path a = ddprun::makeUniqueDirectory(parent, "job_");
  const fs::path b = ddprun::makeUniqueDirectory(parent, "job_");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.parent_path(), parent);
  EXPECT_TRUE(a.filename().string().starts_with("job_"));
  EXPECT_EQ(fs::status(a).permissions(), fs::perms::owner_all);
  fs::remove_all(parent);
}

// The error, not an exception, from the overload a caller that can do
// something else uses; and the exception says the path and the reason.
TEST(UniqueDirectory, AMissingParentIsAnErrorButNotAFullDisk) {
  const fs::path missing = fs::temp_directory_path() / "ddprun-no-such-parent" / "below";
  std::error_code error;
  EXPECT_TRUE(ddprun::makeUniqueDirectory(missing, "job_", error).empty());
  EXPECT_EQ(error, std::errc::no_such_file_or_directory);
  EXPECT_FALSE(ddprun::diskFull(error));
  try {
    ddprun::makeUniqueDirectory(missing, "job_");
    ADD_FAILURE() << "no exception";
  } catch (const ddprun::Error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory; check the disk and the path"),
              std::string::npos)
        << e.what();
  }
}

TEST(UniqueDirectory, AFullDiskIsNoSpaceNoInodesOrQuota) {
  EXPECT_TRUE(ddprun::diskFull(std::make_error_code(std::errc::no_space_on_device)));
  EXPECT_TRUE(ddprun::diskFull(std::error_code(EDQUOT, std::generic_category())));
  EXPECT_TRUE(ddprun::diskFull(std::error_code(EDQUOT, std::system_category())));
  EXPECT_FALSE(ddprun::diskFull(std::make_error_code(std::errc::permission_denied)));
  EXPECT_FALSE(ddprun::diskFull(std::error_code()));
}

}  // namespace
