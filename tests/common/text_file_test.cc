#include "ddprun/common/text_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;

fs::path freshDirectory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string contentOf(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TextFile, ReplaceFileSwapsTheWholeContent) {
  const fs::path dir = freshDirectory("ddprun-replace");
  const fs::path file = dir / "error.json";
  EXPECT_EQ(ddprun::replaceFile(file, "first\n"), "");
  EXPECT_EQ(ddprun::replaceFile(file, "second\n"), "");
  EXPECT_EQ(contentOf(file), "second\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(TextFile, ReplaceFileSaysWhyItCannotAndLeavesNothing) {
  const fs::path dir = freshDirectory("ddprun-replace-fail");
  // A directory where the file should be: the rename fails.
  fs::create_directories(dir / "taken" / "inside");
  EXPECT_EQ(ddprun::replaceFile(dir / "taken", "text"), "Is a directory");
  EXPECT_EQ(ddprun::replaceFile(dir / "missing" / "file", "text"), "No such file or directory");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(TextFile, ReadFirstLineTrimsAndIsEmptyForAMissingFile) {
  const fs::path dir = freshDirectory("ddprun-first-line");
  std::ofstream(dir / "count") << "  4 \nrest\n";
  EXPECT_EQ(ddprun::readFirstLine(dir / "count"), "4");
  EXPECT_EQ(ddprun::readFirstLine(dir / "absent"), "");
  fs::remove_all(dir);
}

}  // namespace
