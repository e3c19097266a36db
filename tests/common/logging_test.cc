// Client text in log lines, and the per-event log limiter.
#include "ddprun/common/logging.h"

#include <gtest/gtest.h>

#include <thread>

namespace ddprun {
namespace {

using namespace std::chrono_literals;

TEST(Printable, EscapesEverythingThatIsNotPlainText) {
  EXPECT_EQ(printable("rank_0/addr"), "rank_0/addr");
  EXPECT_EQ(printable("a\nb"), "a\\x0ab");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1b[31mred");  // no terminal escapes
  EXPECT_EQ(printable("it's \"q\" \\"), "it\\x27s \\x22q\\x22 \\x5c");
  EXPECT_EQ(printable(std::string("\0\xff", 2)), "\\x00\\xff");
}

TEST(Printable, CutsLongTextAndSaysHowLongItWas) {
  EXPECT_EQ(printable(std::string(1'000'000, 'k'), 4), "kkkk... (1000000 bytes)");
  EXPECT_EQ(printable("abcd", 4), "abcd");
}

TEST(LogLimiter, LetsABurstThroughThenCountsWhatItHolds) {
  LogLimiter limiter(3, 100ms);
  std::uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.allow(suppressed));
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.allow(suppressed));
  std::this_thread::sleep_for(120ms);
  EXPECT_TRUE(limiter.allow(suppressed));
  EXPECT_EQ(suppressed, 5u);  // reported with the next line
  EXPECT_TRUE(limiter.allow(suppressed));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace ddprun
