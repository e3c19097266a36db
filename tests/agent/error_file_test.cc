#include "ddprun/agent/workers/error_file.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ddprun::agent {
namespace {

std::filesystem::path write(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path;
}

TEST(ErrorFile, TorchelasticRecordFormat) {
  const auto path = write("record.json", R"({"message": {"message": "ValueError: boom",
      "extraInfo": {"py_callstack": "Traceback\n  line 1", "timestamp": "1700000000"}}})");
  auto error = readErrorFile(path);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->message, "ValueError: boom");
  EXPECT_EQ(error->traceback, "Traceback\n  line 1");
  EXPECT_EQ(error->timestamp, 1700000000);
}

TEST(ErrorFile, PlainMessageFormat) {
  auto error =
      readErrorFile(write("plain.json", R"({"message": "out of memory", "timestamp": 12})"));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->message, "out of memory");
  EXPECT_EQ(error->timestamp, 12);
  EXPECT_TRUE(error->traceback.empty());
}

TEST(ErrorFile, MissingOrGarbledFilesAreIgnored) {
  EXPECT_FALSE(readErrorFile("/nonexistent/error.json"));
  EXPECT_FALSE(readErrorFile(write("empty.json", "")));
  EXPECT_FALSE(readErrorFile(write("garbage.json", "{not json")));
  EXPECT_FALSE(readErrorFile(write("array.json", "[1, 2]")));
  EXPECT_FALSE(readErrorFile(write("nomessage.json", R"({"other": 1})")));
  EXPECT_FALSE(readErrorFile(write("number.json", R"({"message": 5})")));
}

}  // namespace
}  // namespace ddprun::agent
