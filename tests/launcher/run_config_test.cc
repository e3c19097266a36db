#include "run_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddprun/common/error.h"

namespace ddprun::launcher {
namespace {

TEST(RunConfig, Nproc) {
  EXPECT_EQ(parseNproc("4"), 4);
  EXPECT_GE(parseNproc("cpu"), 1);
  EXPECT_GE(parseNproc("auto"), 1);  // no GPU here: the CPU count
  for (const char* bad : {"0", "-1", "abc", "", "4x", "1.5"}) {
    EXPECT_THROW(parseNproc(bad), ConfigError) << bad;
  }
}

TEST(RunConfig, Nnodes) {
  EXPECT_EQ(parseNnodes("1").max, 1);
  const auto range = parseNnodes("2:4");
  EXPECT_EQ(range.min, 2);
  EXPECT_EQ(range.max, 4);
  for (const char* bad : {"0", "2:1", ":", "a", "1:", "-1:2"}) {
    EXPECT_THROW(parseNnodes(bad), ConfigError) << bad;
  }
}

TEST(RunConfig, RdzvConf) {
  EXPECT_TRUE(parseRdzvConf("").empty());
  const auto conf = parseRdzvConf("join_timeout=600,is_host=1,empty=");
  EXPECT_EQ(conf.at("join_timeout"), "600");
  EXPECT_EQ(conf.at("is_host"), "1");
  EXPECT_EQ(conf.at("empty"), "");
  for (const char* bad : {"novalue", "=x", "a=1,,b=2", "a=1,"}) {
    EXPECT_THROW(parseRdzvConf(bad), ConfigError) << bad;
  }
}

TEST(RunConfig, ResolvesExecutablesOnPath) {
  EXPECT_EQ(resolveExecutable("sh", "the program").back(), 'h');
  EXPECT_EQ(resolveExecutable("/bin/sh", "the program"), "/bin/sh");
  EXPECT_THROW(resolveExecutable("no-such-binary-xyz", "the program"), ConfigError);
  const std::string plain = ::testing::TempDir() + "/plain-file";
  std::ofstream(plain) << "data";
  std::filesystem::permissions(plain, std::filesystem::perms(0644));
  EXPECT_THROW(resolveExecutable(plain, "the program"), ConfigError);
}

TEST(RunConfig, BuildsTheAgentConfig) {
  LaunchOptions o;
  o.nprocPerNode = "3";
  o.maxRestarts = "2";
  o.shutdownTimeout = "1.5";
  o.redirects = "1:3";
  o.localRanksFilter = "0,2";
  o.rdzvId = "myjob";
  o.program = {"/bin/echo", "${local_rank}"};
  std::string notices;
  const auto config = buildAgentConfig(o, notices);
  EXPECT_EQ(config.nprocPerNode, 3);
  EXPECT_EQ(config.maxRestarts, 2);
  EXPECT_EQ(config.shutdownTimeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(config.redirects.forRank(1), agent::Streams::kBoth);
  EXPECT_EQ(*config.localRanksFilter, (std::set<int>{0, 2}));
  EXPECT_EQ(config.runId, "myjob");
  EXPECT_EQ(config.command, (std::vector<std::string>{"/bin/echo", "${local_rank}"}));
  EXPECT_EQ(config.programName, "echo");
}

TEST(RunConfig, PythonProgramsRunUnbuffered) {
  LaunchOptions o;
  o.module = true;
  o.program = {"pkg.train", "--lr", "1"};
  std::string notices;
  const auto config = buildAgentConfig(o, notices);
  ASSERT_EQ(config.command.size(), 6u);
  EXPECT_EQ(config.command[1], "-u");
  EXPECT_EQ(config.command[2], "-m");
  EXPECT_EQ(config.command[3], "pkg.train");
  EXPECT_EQ(config.programName, "pkg.train");
}

}  // namespace
}  // namespace ddprun::launcher
