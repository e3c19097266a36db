#include "run_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddprun/common/error.h"
#include "rdzv_conf.h"
#include "torch_version.h"

namespace ddprun::launcher {
namespace {

TEST(RunConfig, Nproc) {
  EXPECT_EQ(parseNproc("4"), 4);
  EXPECT_GE(parseNproc("cpu"), 1);
  EXPECT_GE(parseNproc("auto"), 1);  // no GPU here: the CPU count
  for (const char* bad : {"0", "-1", "abc", "", "4x", "1.5", "cuda"}) {
    EXPECT_THROW(parseNproc(bad), ConfigError) << bad;
  }
  // No Intel GPU here: xpu names what is missing, as gpu does.
  try {
    parseNproc("xpu");
    ADD_FAILURE() << "xpu on a machine without an Intel GPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no Intel GPU"), std::string::npos) << e.what();
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
  EXPECT_FALSE(RdzvConf::parse("").has("join_timeout"));
  const auto conf = RdzvConf::parse("join_timeout=600, is_host = 1,store_type=tcp");
  EXPECT_EQ(conf.seconds("join_timeout"), std::chrono::seconds(600));
  EXPECT_EQ(conf.boolean("is_host"), true);
  EXPECT_EQ(conf.text("store_type"), "tcp");
  for (const char* bad :
       {"novalue", "=x", "join_timeout=1,,is_host=1", "join_timeout=1,", "join_timeout="}) {
    EXPECT_THROW(RdzvConf::parse(bad), ConfigError) << bad;
  }
  // Every key torchrun's backends read is known.
  for (const char* key : {"join_timeout",
                          "last_call_timeout",
                          "close_timeout",
                          "heartbeat_timeout",
                          "keep_alive_interval",
                          "keep_alive_max_attempt",
                          "read_timeout",
                          "is_host",
                          "store_type",
                          "use_libuv",
                          "timeout",
                          "rank",
                          "protocol",
                          "ssl_cert",
                          "ssl_cert_key",
                          "ca_cert",
                          "cert",
                          "key",
                          "cacert",
                          "etcd_prefix",
                          "token_file"}) {
    EXPECT_TRUE(RdzvConf::parse(std::string(key) + "=1").has(key)) << key;
  }
  for (const char* t : {"True", "t", "YES", "y", "1"}) {
    EXPECT_EQ(RdzvConf::parse(std::string("is_host=") + t).boolean("is_host"), true) << t;
  }
  EXPECT_THROW(RdzvConf::parse("is_host=maybe").boolean("is_host"), ConfigError);
}

TEST(RunConfig, UnknownRdzvConfKeyNamesTheNearestKnownOne) {
  try {
    RdzvConf::parse("jion_timeout=2");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'jion_timeout'"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'join_timeout'"), std::string::npos) << message;
  }
  EXPECT_EQ(nearestKnownKey("keepalive_interval"), "keep_alive_interval");
  EXPECT_EQ(nearestKnownKey("readtimeout"), "read_timeout");
}

TEST(RunConfig, TorchVersions) {
  EXPECT_EQ(parseTorchVersion("1.13.1")->minor, 13);
  EXPECT_EQ(parseTorchVersion("2.6.0+debian")->major, 2);
  EXPECT_EQ(parseTorchVersion("2.10.0a0+git")->minor, 10);
  EXPECT_FALSE(parseTorchVersion(""));
  EXPECT_FALSE(parseTorchVersion("torch"));
  // Debian's python3-torch, installed by scripts/setup.
  const auto system = probeTorchVersion("/usr/bin/python3");
  ASSERT_TRUE(system);
  EXPECT_EQ(system->text.substr(0, 4), "1.13");
  EXPECT_FALSE(probeTorchVersion("/nonexistent/python"));
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
  EXPECT_EQ(config.restarts.maxRestarts, 2);
  EXPECT_EQ(config.stopping.shutdownTimeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(config.output.redirects.forRank(1), agent::Streams::kBoth);
  EXPECT_EQ(*config.output.localRanksFilter, (std::set<int>{0, 2}));
  EXPECT_EQ(config.runId, "myjob");
  EXPECT_EQ(config.command, (std::vector<std::string>{"/bin/echo", "${local_rank}"}));
  EXPECT_EQ(config.programName, "echo");
  // The default signals, in Python's spelling for the workers.
  EXPECT_EQ(config.stopping.signalsToHandle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
}

// ddprun-launch (torch.distributed.launch's command line): the script's
// first argument is the local rank, unless --use_env.
TEST(RunConfig, LegacyLaunchPassesTheLocalRankAfterTheScript) {
  const auto script = std::filesystem::temp_directory_path() / "ddprun_legacy_launch_test.py";
  std::ofstream(script) << "print(1)\n";
  LaunchOptions o;
  o.legacyLaunch = true;
  o.program = {script.string(), "--epochs", "2"};
  std::string notices;
  auto config = buildAgentConfig(o, notices);
  ASSERT_EQ(config.command.size(), 6u);
  EXPECT_EQ(config.command[1], "-u");
  EXPECT_EQ(config.command[2], script.string());
  // Debian's python3 has PyTorch 1.13 (--local_rank); without a torch the
  // current spelling.
  const auto version = probeTorchVersion(config.command[0]);
  const std::string localRank =
      version && version->major < 2 ? "--local_rank=${local_rank}" : "--local-rank=${local_rank}";
  EXPECT_EQ(config.command[3], localRank);
  EXPECT_EQ(config.command[4], "--epochs");

  o.module = true;
  o.program = {"pkg.train", "--epochs", "2"};
  config = buildAgentConfig(o, notices);
  EXPECT_EQ(config.command[2], "-m");
  EXPECT_EQ(config.command[3], "pkg.train");
  EXPECT_EQ(config.command[4], localRank);
  EXPECT_EQ(config.command[5], "--epochs");

  o.module = false;
  o.useEnv = true;  // --use_env: LOCAL_RANK only
  o.program = {script.string(), "--epochs", "2"};
  config = buildAgentConfig(o, notices);
  EXPECT_EQ(config.command.size(), 5u);
  EXPECT_EQ(config.command[3], "--epochs");

  // ddprun itself never adds it.
  o.legacyLaunch = false;
  o.useEnv = false;
  config = buildAgentConfig(o, notices);
  EXPECT_EQ(config.command.size(), 5u);
  std::filesystem::remove(script);
}

TEST(RunConfig, LegacyLaunchRefusesNoPythonWithoutUseEnv) {
  LaunchOptions o;
  o.legacyLaunch = true;
  o.noPython = true;
  o.program = {"/bin/echo"};
  std::string notices;
  try {
    buildAgentConfig(o, notices);
    ADD_FAILURE() << "--no_python without --use_env was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("add --use_env"), std::string::npos) << e.what();
  }
  o.useEnv = true;
  EXPECT_EQ(buildAgentConfig(o, notices).command, (std::vector<std::string>{"/bin/echo"}));
}

TEST(RunConfig, SignalsToHandleReachWorkersInPythonsSpelling) {
  LaunchOptions o;
  o.program = {"/bin/true"};
  o.signalsToHandle = "term, usr1,SIGINT,TERM";
  std::string notices;
  const auto config = buildAgentConfig(o, notices);
  EXPECT_EQ(config.stopping.signalsToHandle, "SIGTERM,SIGUSR1,SIGINT");
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
