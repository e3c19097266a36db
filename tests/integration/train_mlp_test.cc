// examples/train_mlp under the real ddprun: the demo's loss drops, and a
// worker killed mid-run resumes from the last checkpoint and ends with the
// same parameters as an undisturbed run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>

#include "child_process.h"
#include "launcher_support.h"
#include "slurm_variables.h"

namespace ddprun::harness {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kTrainMlp = kBinDir + "/train_mlp";

std::string finalChecksum(const std::string& out) {
  std::smatch match;
  if (!std::regex_search(out, match, std::regex("final checksum (\\S+)"))) return "";
  return match[1];
}

double lossAt(const std::string& out, int step, int steps) {
  std::smatch match;
  const std::regex line(fmt::format("step {}/{} loss ([0-9.]+)", step, steps));
  if (!std::regex_search(out, match, line)) return -1;
  return std::stod(match[1]);
}

// The pid of the worker of `ddprun` whose environment says RANK=`rank`.
pid_t workerWithRank(pid_t ddprun, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    std::string state;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent != ddprun) continue;
    std::ifstream environ(entry.path() / "environ");
    const std::string wanted = "RANK=" + std::to_string(rank);
    for (std::string variable; std::getline(environ, variable, '\0');) {
      if (variable == wanted) return std::stoi(name);
    }
  }
  return -1;
}

TEST(TrainMlp, LossDropsOnTwoRanksAndOnlyRankZeroPrints) {
  const auto result = runDdprun(
      {"--standalone", "--nproc_per_node=2", kTrainMlp, "--steps", "200", "--log_every", "50"}, {},
      120s);
  ASSERT_EQ(result.code, 0) << result.out << result.err;
  const double first = lossAt(result.out, 1, 200);
  const double last = lossAt(result.out, 200, 200);
  ASSERT_GT(first, 0) << result.out;
  ASSERT_GT(last, 0) << result.out;
  EXPECT_LT(last, first * 0.6) << result.out;
  EXPECT_EQ(linesWith(result.out, "[rank 1]").size(), 0u) << result.out;
  EXPECT_EQ(linesWith(result.out, "[rank 0]: final checksum").size(), 1u) << result.out;
}

TEST(TrainMlp, BothStrategiesTrainTheSameModel) {
  std::vector<std::string> checksums;
  for (const std::string strategy : {"overlap", "simple"}) {
    const auto result = runDdprun(
        {"--standalone", "--nproc_per_node=2", kTrainMlp, "--steps", "60", "--strategy", strategy},
        {}, 120s);
    ASSERT_EQ(result.code, 0) << result.out << result.err;
    checksums.push_back(finalChecksum(result.out));
  }
  ASSERT_FALSE(checksums[0].empty());
  EXPECT_NEAR(std::stod(checksums[0]), std::stod(checksums[1]), 1e-3);
}

// The C++ workers' native store connections through the node relay (their
// worker credential checked there): the same model as direct.
TEST(TrainMlp, ThroughTheNodeRelayItTrainsTheSameModel) {
  std::vector<std::string> checksums;
  for (const std::string relay : {"off", "on"}) {
    const auto result = runDdprun({"--standalone", "--nproc_per_node=2", "--store_relay=" + relay,
                                   kTrainMlp, "--steps", "60"},
                                  {}, 120s);
    ASSERT_EQ(result.code, 0) << result.out << result.err;
    checksums.push_back(finalChecksum(result.out));
  }
  ASSERT_FALSE(checksums[0].empty());
  EXPECT_EQ(checksums[0], checksums[1]);
}

TEST(TrainMlp, AKilledWorkerResumesFromTheCheckpointWithTheSameResult) {
  const std::vector<std::string> training = {
      kTrainMlp, "--steps", "400", "--log_every", "20", "--checkpoint_every", "25", "--resume"};
  const auto undisturbedDir = scratch("undisturbed");
  auto args = std::vector<std::string>{"--standalone", "--nproc_per_node=2", "--max_restarts=1"};
  args.insert(args.end(), training.begin(), training.end());
  auto undisturbedArgs = args;
  undisturbedArgs.insert(undisturbedArgs.end(), {"--checkpoint_dir", undisturbedDir.string()});
  const auto undisturbed = runDdprun(undisturbedArgs, {}, 180s);
  ASSERT_EQ(undisturbed.code, 0) << undisturbed.out << undisturbed.err;
  const std::string expected = finalChecksum(undisturbed.out);
  ASSERT_FALSE(expected.empty()) << undisturbed.out;

  const auto disturbedDir = scratch("disturbed");
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--checkpoint_dir", disturbedDir.string()});
  ChildProcess ddprun(argv);
  std::string seen;
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = ddprun.readStdoutLine(100ms);
    if (!line) continue;
    seen += *line + "\n";
    if (line->find("step 120/400") != std::string::npos) {
      victim = workerWithRank(ddprun.pid(), 1);
      break;
    }
  }
  ASSERT_GT(victim, 0) << "rank 1 not found; output so far:\n" << seen;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto code = ddprun.wait(180s);
  const std::string out = seen + ddprun.stdoutText();
  const std::string err = ddprun.stderrText();
  ASSERT_TRUE(code.has_value()) << "ddprun did not finish";
  EXPECT_EQ(*code, 0) << out << err;
  EXPECT_TRUE(std::regex_search(out, std::regex("resumed from .* at step (100|125)"))) << out;
  EXPECT_NE((out + err).find("SIGKILL"), std::string::npos) << "the report names the signal\n"
                                                            << out << err;
  EXPECT_EQ(finalChecksum(out), expected) << out;
}

// The same training under the launchers people use without ddprun: Debian's
// torchrun 1.13 (which sets no DDPRUN_TOKEN: the ranks meet through
// PyTorch's TCPStore) and a plain srun-style start (SLURM's variables,
// rank 0 hosts the TCPStore). Both end with ddprun's checksum.
std::string checksumUnderDdprun(int steps) {
  const auto result =
      runDdprun({"--standalone", "--nproc_per_node=2", kTrainMlp, "--steps", std::to_string(steps)},
                {}, 120s);
  EXPECT_EQ(result.code, 0) << result.out << result.err;
  return finalChecksum(result.out);
}

TEST(TrainMlp, UnderDebiansTorchrunWithoutATokenItTrainsTheSameModel) {
  ASSERT_TRUE(fs::exists("/usr/bin/torchrun"))
      << "Debian's torchrun is missing: scripts/setup installs python3-torch";
  const std::string expected = checksumUnderDdprun(40);
  ASSERT_FALSE(expected.empty());
  const auto logs = scratch("torchrun-logs");
  // Debian's torchrun 1.13 needs these output options under Python 3.11.
  ChildProcess torchrun({"/usr/bin/torchrun", "--standalone", "--nproc_per_node=2", "--redirects",
                         "1", "--tee", "2", "--log_dir", logs.string(), "--monitor_interval", "0.1",
                         "--no_python", kTrainMlp, "--steps", "40"},
                        {{"DDPRUN_TOKEN", ""}, {"DDPRUN_STORE_HOST", ""}});
  const auto code = torchrun.wait(180s);
  ASSERT_TRUE(code.has_value()) << "torchrun did not finish";
  ASSERT_EQ(*code, 0) << torchrun.stdoutText() << torchrun.stderrText();
  // Rank 0's stdout went to <log_dir>/<run id>/attempt_0/0/stdout.log.
  std::string rankZero;
  for (const auto& entry : fs::recursive_directory_iterator(logs)) {
    if (entry.path().filename() != "stdout.log") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.find("final checksum") != std::string::npos) rankZero = text;
  }
  EXPECT_EQ(finalChecksum(rankZero), expected) << rankZero;
}

TEST(TrainMlp, UnderAPlainSrunStyleStartItTrainsTheSameModel) {
  const std::string expected = checksumUnderDdprun(40);
  ASSERT_FALSE(expected.empty());
  const std::uint16_t port = freePort();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    auto slurm = slurmVariables(rank, 2, port, "777");
    // No token and no ddprun: the ranks meet through rank 0's TCPStore.
    for (const char* name : {"DDPRUN_TOKEN", "DDPRUN_STORE_HOST", "RANK", "WORLD_SIZE"}) {
      slurm[name] = "";
    }
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{kTrainMlp, "--steps", "40"}, slurm));
  }
  for (auto& rank : ranks) {
    const auto code = rank->wait(180s);
    ASSERT_TRUE(code.has_value()) << "a rank did not finish";
    EXPECT_EQ(*code, 0) << rank->stdoutText() << rank->stderrText();
  }
  EXPECT_EQ(finalChecksum(ranks[0]->stdoutText()), expected) << ranks[0]->stdoutText();
}

}  // namespace
}  // namespace ddprun::harness
