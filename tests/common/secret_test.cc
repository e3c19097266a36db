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

namespace ddprun {
namespace {

TEST(WorkerCredential, NamesItsJobAndOnlyTheTokenMakesIt) {
  const std::string credential = workerCredential("agents-token", "job7");
  EXPECT_EQ(credential.rfind("worker:job7:", 0), 0u);
  EXPECT_EQ(credential.find("agents-token"), std::string::npos);
  EXPECT_EQ(workerCredentialJob(credential, "agents-token"), "job7");
  EXPECT_EQ(workerCredentialJob(credential, "another-token"), std::nullopt);
  // Another job's name on this job's MAC, a cut MAC, garbage: refused.
  std::string forged = credential;
  forged.replace(7, 4, "job8");
  EXPECT_EQ(workerCredentialJob(forged, "agents-token"), std::nullopt);
  EXPECT_EQ(workerCredentialJob(credential.substr(0, credential.size() - 1), "agents-token"),
            std::nullopt);
  EXPECT_EQ(workerCredentialJob("worker:", "agents-token"), std::nullopt);
  EXPECT_EQ(workerCredentialJob("agents-token", "agents-token"), std::nullopt);
  // Job names may hold colons.
  EXPECT_EQ(workerCredentialJob(workerCredential("t", "a:b"), "t"), "a:b");
}

TEST(WorkerCredential, AnOpenStoreHasNone) {
  EXPECT_EQ(workerCredential("", "job"), "");
  EXPECT_EQ(workerCredentialJob("", ""), std::nullopt);
}

}  // namespace
}  // namespace ddprun
