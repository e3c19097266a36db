#include "ddprun/common/parse.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

TEST(Parse, IntegersMustBeWhole) {
  EXPECT_EQ(parseInteger("42"), 42);
  EXPECT_EQ(parseInteger("-3"), -3);
  for (const char* bad : {"", "1.5", "12x", " 1", "99999999999999999999"}) {
    EXPECT_FALSE(parseInteger(bad)) << bad;
  }
}

TEST(Parse, SecondsAreNonNegativeAndBounded) {
  EXPECT_EQ(parseSeconds("0.25", 10), 0.25);
  EXPECT_EQ(parseSeconds("30", 30), 30);
  for (const char* bad : {"", "-1", "soon", "1s", "31", "nan"}) {
    EXPECT_FALSE(parseSeconds(bad, 30)) << bad;
  }
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

TEST(Parse, SplitListKeepsEmptyItems) {
  EXPECT_EQ(splitList("a,b,,c"), (std::vector<std::string_view>{"a", "b", "", "c"}));
  EXPECT_EQ(splitList(""), (std::vector<std::string_view>{""}));
  EXPECT_EQ(splitList("0-3:8", ':'), (std::vector<std::string_view>{"0-3", "8"}));
  EXPECT_EQ(trimSpaces("  SIGTERM\t"), "SIGTERM");
  EXPECT_EQ(trimSpaces("   "), "");
}

}  // namespace
}  // namespace ddprun
