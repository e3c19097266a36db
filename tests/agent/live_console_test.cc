#include "ddprun/agent/output/live_console.h"

#include <gtest/gtest.h>

#include <string>

namespace ddprun::agent {
namespace {

// The bytes written, with the descriptor before each write ("1:" stdout).
struct Screen {
  std::string bytes;
  LiveConsole console{[this](int fd, std::string_view data) {
    bytes += std::to_string(fd) + ":";
    bytes += data;
    bytes += "|";
  }};
};

TEST(LiveConsole, ShownIsWhatATerminalLeaves) {
  EXPECT_EQ(LiveConsole::shown("plain"), "plain");
  EXPECT_EQ(LiveConsole::shown("\r 10%\r 20%"), " 20%");
  EXPECT_EQ(LiveConsole::shown("\r 10%\r 20%\r"), " 20%");
  EXPECT_EQ(LiveConsole::shown("\r"), "");
  EXPECT_EQ(LiveConsole::shown("done\r"), "done");
}

TEST(LiveConsole, CompleteLinesAreWrittenAsLines) {
  Screen s;
  s.console.line(0, 1, "[rank 0]: ", "hello");
  EXPECT_EQ(s.bytes, "1:[rank 0]: hello\n|");
}

TEST(LiveConsole, AnUpdateRedrawsItsRowWithThePrefix) {
  Screen s;
  s.console.partial(0, 2, "[r0] ", "\r 10%");
  s.console.partial(0, 2, "[r0] ", "\r 10%\r 20%");
  s.console.line(0, 2, "[r0] ", "\r 10%\r 20%\r100%");
  EXPECT_EQ(s.bytes,
            "2:\r\x1b[K[r0]  10%|"
            "2:\r\x1b[K[r0]  20%|"
            "2:\r\x1b[K[r0] 100%\n|");
}

TEST(LiveConsole, TextOnlyAppendedToIsWrittenAsTheRest) {
  Screen s;
  s.console.partial(0, 1, "> ", "Epoch 1");
  s.console.partial(0, 1, "> ", "Epoch 1 ...");
  EXPECT_EQ(s.bytes, "1:\r\x1b[K> Epoch 1|1: ...|");
}

TEST(LiveConsole, AnotherStreamsLineGoesAboveTheOpenLine) {
  Screen s;
  s.console.partial(0, 2, "[r0] ", "\r 10%");
  s.console.line(3, 1, "[r1] ", "loss 0.5");
  EXPECT_EQ(s.bytes,
            "2:\r\x1b[K[r0]  10%|"
            "2:\r\x1b[K|1:[r1] loss 0.5\n|"
            "2:\r\x1b[K[r0]  10%|");
}

TEST(LiveConsole, AnotherStreamsUpdateTakesTheRowOver) {
  Screen s;
  s.console.partial(0, 2, "[r0] ", "\ra");
  s.console.partial(2, 2, "[r1] ", "\rb");
  s.console.line(0, 2, "[r0] ", "\ra\rdone");
  // r0's line was no longer drawn: it is written as a new line above r1's.
  EXPECT_EQ(s.bytes,
            "2:\r\x1b[K[r0] a|"
            "2:\r\x1b[K[r1] b|"
            "2:\r\x1b[K|2:[r0] done\n|2:\r\x1b[K[r1] b|");
}

TEST(LiveConsole, ClosingOrOtherOutputEndsTheOpenLine) {
  Screen s;
  s.console.partial(0, 1, "", "half");
  s.console.close(2);  // not its owner: nothing
  s.console.close(0);
  s.console.endOpenLine();  // nothing open any more
  EXPECT_EQ(s.bytes, "1:\r\x1b[Khalf|1:\n|");
}

}  // namespace
}  // namespace ddprun::agent
