#include "ddprun/agent/std_spec.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

TEST(StdSpec, SingleValueAppliesToEveryRank) {
  std::string error;
  for (int v = 0; v <= 3; ++v) {
    auto spec = parseStdSpec(std::to_string(v), error);
    ASSERT_TRUE(spec) << error;
    EXPECT_EQ(spec->forRank(0), static_cast<Streams>(v));
    EXPECT_EQ(spec->forRank(123), static_cast<Streams>(v));
  }
}

TEST(StdSpec, PerRankValuesWithMultiDigitRanks) {
  std::string error;
  auto spec = parseStdSpec("0:3,12:1,7:2", error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->forRank(0), Streams::kBoth);
  EXPECT_EQ(spec->forRank(12), Streams::kOut);
  EXPECT_EQ(spec->forRank(7), Streams::kErr);
  EXPECT_EQ(spec->forRank(1), Streams::kNone);
  EXPECT_TRUE(includes(Streams::kBoth, Streams::kErr));
  EXPECT_FALSE(includes(Streams::kOut, Streams::kErr));
}

TEST(StdSpec, MalformedTextIsRefusedWithTheReason) {
  for (const char* bad :
       {"", "4", "-1", "x", "0:4", "a:1", "0:", ":1", "0:1,", "0:1,0:2", "1:1,,2:2", " 1"}) {
    std::string error;
    EXPECT_FALSE(parseStdSpec(bad, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

}  // namespace
}  // namespace ddprun::agent
