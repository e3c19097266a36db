#include "ddprun/common/secret.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "ddprun/common/error.h"

namespace ddprun {
namespace {

TEST(ConstantTimeEquals, ComparesContentAndLength) {
  EXPECT_TRUE(constantTimeEquals("secret", "secret"));
  EXPECT_TRUE(constantTimeEquals("", ""));
  EXPECT_FALSE(constantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(constantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(constantTimeEquals("", "x"));
  EXPECT_FALSE(constantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ReadTokenFile, StripsOneTrailingNewline) {
  const std::string path = ::testing::TempDir() + "/token";
  std::ofstream(path) << "abc\n";
  EXPECT_EQ(readTokenFile(path), "abc");
}

TEST(ReadTokenFile, RejectsMissingAndEmptyFiles) {
  EXPECT_THROW(readTokenFile("/nonexistent/token"), ConfigError);
  const std::string path = ::testing::TempDir() + "/empty-token";
  std::ofstream(path) << "\n";
  EXPECT_THROW(readTokenFile(path), ConfigError);
}

TEST(RandomToken, IsLongAndFresh) {
  const auto a = randomToken();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, randomToken());
}

}  // namespace
}  // namespace ddprun
