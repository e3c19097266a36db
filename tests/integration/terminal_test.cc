// Workers' output on a terminal (--tty): ddprun runs on a pseudo-terminal
// the test reads, as under a user's shell.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launcher_support.h"
#include "terminal_process.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::args;
using harness::kDdprun;
using harness::launchDir;
using harness::runDdprun;
using harness::scratch;
using harness::TerminalProcess;
using harness::writeScript;
namespace fs = std::filesystem;

// Reports whether its streams are terminals and the width of stderr's, then
// draws a progress line with '\r' and ends it only once the file `go`
// exists: the test creates it after it saw the first update on its terminal,
// so the update cannot have waited for the end of the line.
constexpr char kProgressScript[] = R"(
import os, sys, time
go = sys.argv[1]
cols = os.get_terminal_size(2).columns if sys.stderr.isatty() else 0
print(f"isatty {sys.stdout.isatty()} {sys.stderr.isatty()} cols {cols}", flush=True)
sys.stderr.write(f"\rprogress 1/2 at {time.monotonic_ns()} ns"); sys.stderr.flush()
while not os.path.exists(go): time.sleep(0.01)
sys.stderr.write("\rprogress 2/2\n")
sys.stderr.write("last line A\nlast line B\n"); sys.stderr.flush()
sys.exit(int(os.environ.get("EXIT_CODE", "1")))
)";

// Prints its terminal's width, then again after each SIGWINCH.
constexpr char kResizeScript[] = R"(
import os, signal, sys, time
resized = []
signal.signal(signal.SIGWINCH, lambda *a: resized.append(1))
print(f"cols {os.get_terminal_size(1).columns} ready", flush=True)
while not resized: time.sleep(0.01)
print(f"cols {os.get_terminal_size(1).columns} after", flush=True)
)";

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> python(const fs::path& script, const fs::path& go) {
  return {"--no_python", "/usr/bin/python3", "-u", script.string(), go.string()};
}

TEST(Terminal, AProgressUpdateIsShownBeforeItsLineEnds) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "progress.py", kProgressScript);
  const fs::path go = dir / "go";
  TerminalProcess ddprun(args({kDdprun, "--nproc_per_node=1", "--tee=3",
                               "--log_dir=" + (dir / "logs").string(), "--rdzv_id=bar"},
                              python(script, go)),
                         {}, 100, 30);
  // The worker's own terminal: 100 columns less the 10 of "[rank 0]: ".
  ASSERT_TRUE(ddprun.waitFor("[rank 0]: isatty True True cols 90\n", 60s)) << ddprun.text();
  ASSERT_TRUE(ddprun.waitFor("[rank 0]: progress 1/2 at ", 60s)) << ddprun.text();
  ASSERT_TRUE(ddprun.waitFor(" ns", 60s, ddprun.text().find("[rank 0]: progress 1/2 at ")))
      << ddprun.text();
  // How long the update took from the worker's write to this terminal
  // (both clocks CLOCK_MONOTONIC): reported, not asserted. The handshake is
  // what shows that it did not wait for the end of its line.
  const auto seen = std::chrono::steady_clock::now().time_since_epoch();
  const std::string& text = ddprun.text();
  const auto at = text.find("progress 1/2 at ") + 16;
  const long long written = std::stoll(text.substr(at, text.find(' ', at) - at));
  std::cout << "progress update on the terminal "
            << static_cast<double>(
                   std::chrono::duration_cast<std::chrono::nanoseconds>(seen).count() - written) /
                   1e6
            << " ms after the worker wrote it\n";
  std::ofstream{go};
  ASSERT_EQ(ddprun.wait(60s), 1) << ddprun.text();
  const std::string& screen = ddprun.text();
  // Redrawn in place, with its prefix, then ended.
  EXPECT_NE(screen.find("\r\x1b[K[rank 0]: progress 2/2\n"), std::string::npos) << screen;
  // The failure report has the last lines as the terminal showed them.
  EXPECT_NE(screen.find("last lines of stderr:\n    progress 2/2\n    last line A\n    last line "
                        "B\n"),
            std::string::npos)
      << screen;
  // The log file got every byte the worker wrote, unchanged.
  const fs::path logs = launchDir(dir / "logs", "bar");
  EXPECT_EQ(readFile(logs / "attempt_0" / "0" / "stderr.log"),
            "\rprogress 1/2 at " + std::to_string(written) +
                " ns\rprogress 2/2\nlast line A\nlast line B\n");
  EXPECT_EQ(readFile(logs / "attempt_0" / "0" / "stdout.log"), "isatty True True cols 90\n");
}

TEST(Terminal, NeverGivesPipesAndWholeLines) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "progress.py", kProgressScript);
  const fs::path go = dir / "go";
  std::ofstream{go};
  TerminalProcess ddprun(args({kDdprun, "--nproc_per_node=1", "--tty=never"}, python(script, go)),
                         {});
  ASSERT_EQ(ddprun.wait(60s), 1) << ddprun.text();
  EXPECT_NE(ddprun.text().find("[rank 0]: isatty False False cols 0\n"), std::string::npos)
      << ddprun.text();
  EXPECT_NE(ddprun.text().find(" ns\rprogress 2/2\n"), std::string::npos) << ddprun.text();
}

TEST(Terminal, OutputThatIsNoTerminalIsWrittenInWholeLines) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "progress.py", kProgressScript);
  const fs::path go = dir / "go";
  std::ofstream{go};
  const auto piped = runDdprun(args({"--nproc_per_node=1"}, python(script, go)));
  EXPECT_EQ(piped.code, 1) << piped.err;
  EXPECT_NE(piped.out.find("[rank 0]: isatty False False cols 0\n"), std::string::npos)
      << piped.out;
  EXPECT_NE(piped.err.find("[rank 0]: \rprogress 1/2 at "), std::string::npos) << piped.err;
  EXPECT_NE(piped.err.find(" ns\rprogress 2/2\n"), std::string::npos) << piped.err;
  EXPECT_EQ(piped.err.find("\x1b["), std::string::npos) << piped.err;
  // --tty=always: terminals for the workers all the same (colour in logs).
  const auto always = runDdprun(args({"--nproc_per_node=1", "--tty=always"}, python(script, go)));
  EXPECT_NE(always.out.find("[rank 0]: isatty True True cols 80\n"), std::string::npos)
      << always.out;
}

TEST(Terminal, RanksFilterHidesTheOthersAndTheyGetNoTerminal) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "progress.py", kProgressScript);
  const fs::path go = dir / "go";
  std::ofstream{go};
  TerminalProcess ddprun(args({kDdprun, "--nproc_per_node=2", "--local_ranks_filter=0", "--tee=1",
                               "--log_dir=" + (dir / "logs").string(), "--rdzv_id=filter"},
                              python(script, go)),
                         {{"EXIT_CODE", "0"}});
  ASSERT_EQ(ddprun.wait(60s), 0) << ddprun.text();
  EXPECT_NE(ddprun.text().find("[rank 0]: isatty True True cols 90\n"), std::string::npos)
      << ddprun.text();
  EXPECT_EQ(ddprun.text().find("[rank 1]:"), std::string::npos) << ddprun.text();
  const fs::path logs = launchDir(dir / "logs", "filter");
  EXPECT_EQ(readFile(logs / "attempt_0" / "1" / "stdout.log"), "isatty False False cols 0\n");
}

TEST(Terminal, WorkersTerminalsFollowDdprunsWindowSize) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "resize.py", kResizeScript);
  TerminalProcess ddprun(
      {kDdprun, "--nproc_per_node=1", "--no_python", "/usr/bin/python3", "-u", script.string()}, {},
      100, 30);
  ASSERT_TRUE(ddprun.waitFor("[rank 0]: cols 90 ready\n", 60s)) << ddprun.text();
  ddprun.resize(60, 20);
  ASSERT_EQ(ddprun.wait(60s), 0) << ddprun.text();
  EXPECT_NE(ddprun.text().find("[rank 0]: cols 50 after\n"), std::string::npos) << ddprun.text();
}

TEST(Terminal, APreloadedWorkerGetsItsTerminalToo) {
  const fs::path dir = scratch();
  const fs::path script = writeScript(dir, "progress.py", kProgressScript);
  const fs::path go = dir / "go";
  std::ofstream{go};
  TerminalProcess ddprun(
      {kDdprun, "--nproc_per_node=1", "--preload=json", script.string(), go.string()},
      {{"PYTHON_EXEC", "/usr/bin/python3"}, {"EXIT_CODE", "0"}});
  ASSERT_EQ(ddprun.wait(60s), 0) << ddprun.text();
  EXPECT_NE(ddprun.text().find("workers are forked from it"), std::string::npos) << ddprun.text();
  EXPECT_NE(ddprun.text().find("[rank 0]: isatty True True cols 90\n"), std::string::npos)
      << ddprun.text();
}

TEST(Terminal, BadTtyValueIsRefused) {
  const auto r = runDdprun({"--tty=yes", "/bin/true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tty=yes is not auto, always or never"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ddprun
