// The frameworks users train with, from PyPI (the project's environment:
// requirements/torch-current.txt), under ddprun and under torchrun of the
// same PyTorch: Lightning, NequIP, Accelerate, torchft, and py-spy's stacks
// in hang reports. Scripts: tests/integration/frameworks/.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher_support.h"
#include "terminal_process.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::freePort;
using harness::kDdprun;
using harness::runCommand;
using harness::RunResult;
using harness::scratch;
using harness::TerminalProcess;
namespace fs = std::filesystem;

const std::string kVenvBin = DDPRUN_VENV_BIN;
const std::string kPython = kVenvBin + "/python";
const std::string kTorchrun = kVenvBin + "/torchrun";
const fs::path kScripts = fs::path(DDPRUN_SOURCE_DIR) / "tests/integration/frameworks";
const fs::path kLightning = kScripts / "lightning_train.py";

// Workers' Python: the project's environment; one thread each.
std::map<std::string, std::string> pythonEnv(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", kPython);
  extra.emplace("OMP_NUM_THREADS", "1");
  extra.emplace("PYTHONPATH", kScripts.string());
  return extra;
}

// One launch is bounded well inside ctest's 300 s: a run that hangs fails
// with what it printed (which launcher, which step), not a bare timeout.
constexpr auto kLaunchLimit = 200s;

RunResult ddprun(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), kDdprun);
  return runCommand(args, pythonEnv(std::move(env)), kLaunchLimit);
}

RunResult torchrun(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), kTorchrun);
  return runCommand(args, pythonEnv(std::move(env)), kLaunchLimit);
}

// Runs every command at once (the nodes of one job) and waits for all.
std::vector<RunResult> runTogether(const std::vector<std::vector<std::string>>& commands) {
  std::vector<std::unique_ptr<ChildProcess>> running;
  for (const auto& argv : commands)
    running.push_back(std::make_unique<ChildProcess>(argv, pythonEnv()));
  std::vector<RunResult> results(commands.size());
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  std::size_t done = 0;
  while (done < running.size() && std::chrono::steady_clock::now() < deadline) {
    done = 0;
    for (std::size_t i = 0; i < running.size(); ++i) {
      results[i].out += running[i]->drainStdout();
      results[i].err += running[i]->drainStderr();
      if (results[i].code >= 0) {
        ++done;
      } else if (auto code = running[i]->wait(0ms)) {
        results[i].code = *code;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  for (std::size_t i = 0; i < running.size(); ++i) {
    results[i].out += running[i]->stdoutText();
    results[i].err += running[i]->stderrText();
  }
  return results;
}

// The text after "weights " on the line rank 0 printed (exact hex floats).
std::string weightsIn(const std::string& out) {
  const auto at = out.find("weights ");
  if (at == std::string::npos) return "<no weights line>";
  return out.substr(at + 8, out.find('\n', at) - at - 8);
}

bool waitForFiles(const std::vector<fs::path>& files, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool all = true;
    for (const auto& file : files) all = all && fs::exists(file);
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

std::vector<std::string> lightning(const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {kLightning.string(), out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// --- Lightning -----------------------------------------------------------

TEST(Lightning, OneNodeTrainsTheSameWeightsAsTorchrun) {
  const fs::path dir = scratch();
  const auto ours = ddprun(concat({"--nproc_per_node=2"}, lightning(dir / "ddprun")));
  ASSERT_EQ(ours.code, 0) << ours.err;
  const auto theirs =
      torchrun(concat({"--standalone", "--nproc_per_node=2"}, lightning(dir / "torchrun")));
  ASSERT_EQ(theirs.code, 0) << theirs.err;
  EXPECT_NE(ours.out.find("rank 1 of 2 starts at epoch 0"), std::string::npos) << ours.out;
  EXPECT_EQ(weightsIn(ours.out), weightsIn(theirs.out));
  EXPECT_EQ(ours.err.find("formed no process group"), std::string::npos) << ours.err;
}

TEST(Lightning, ItsProgressBarMovesOnATerminal) {
  const fs::path dir = scratch();
  // Lightning's progress bar (rank 0 only), on ddprun's terminal: each
  // update redrawn in place with the prefix, sized to the worker's
  // terminal. Lightning draws Rich's bar where `rich` is installed (the
  // environment has it, through Transformers), else TQDM's.
  TerminalProcess job(
      concat({kDdprun, "--nproc_per_node=2"}, lightning(dir, {"--epochs=2", "--progress-bar"})),
      pythonEnv(), 120, 30);
  ASSERT_EQ(job.wait(300s), 0) << job.text();
  const std::string& screen = job.text();
  std::size_t redraws = 0;
  for (const std::string bar :
       {"\r\x1b[K[rank 0]: Epoch 0:", "\r\x1b[K[rank 0]: \x1b[2KEpoch 0/"}) {
    for (auto at = screen.find(bar); at != std::string::npos; at = screen.find(bar, at + 1)) {
      ++redraws;
    }
  }
  EXPECT_GE(redraws, 2u) << screen;
  EXPECT_EQ(screen.find("[rank 1]: Epoch"), std::string::npos) << screen;
}

TEST(Lightning, TwoNodesTrainTheSameWeightsAsTorchrun) {
  const fs::path dir = scratch();
  auto nodes = [&](const std::string& launcher, const fs::path& out) {
    const std::string port = std::to_string(freePort());
    std::vector<std::vector<std::string>> commands;
    for (int node = 0; node < 2; ++node) {
      commands.push_back(
          concat({launcher, "--nnodes=2", "--node_rank=" + std::to_string(node),
                  "--nproc_per_node=1", "--master_addr=127.0.0.1", "--master_port=" + port},
                 lightning(out, {"--devices=1", "--num_nodes=2"})));
    }
    return runTogether(commands);
  };
  const auto ours = nodes(kDdprun, dir / "ddprun");
  ASSERT_EQ(ours[0].code, 0) << ours[0].err;
  ASSERT_EQ(ours[1].code, 0) << ours[1].err;
  const auto theirs = nodes(kTorchrun, dir / "torchrun");
  ASSERT_EQ(theirs[0].code, 0) << theirs[0].err;
  ASSERT_EQ(theirs[1].code, 0) << theirs[1].err;
  EXPECT_NE(ours[1].out.find("rank 1 of 2 starts at epoch 0"), std::string::npos) << ours[1].out;
  EXPECT_EQ(weightsIn(ours[0].out), weightsIn(theirs[0].out));
}

TEST(Lightning, ARestartResumesFromTheLastCheckpoint) {
  const fs::path dir = scratch();
  const auto whole = ddprun(concat({"--nproc_per_node=2"}, lightning(dir / "whole")));
  ASSERT_EQ(whole.code, 0) << whole.err;
  // The last rank is SIGKILLed when epoch 2 starts; the restarted job finds
  // checkpoints/last.ckpt (end of epoch 1) through ckpt_path="last".
  const auto resumed = ddprun(concat({"--nproc_per_node=2", "--max_restarts=1"},
                                     lightning(dir / "resumed", {"--resume", "--die-at-epoch=2"})));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("rank 1 dies at epoch 2"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("rank 0 of 2 starts at epoch 2 (rank_zero_only.rank=0, restart 1)"),
            std::string::npos)
      << resumed.out;
  EXPECT_EQ(weightsIn(resumed.out), weightsIn(whole.out));
}

TEST(Lightning, AStoppedWorkerNeverCountsAsASuccess) {
  const fs::path dir = scratch();
  // Lightning 2.6.6 turns SIGTERM into exit code 0 (SIGTERMException is a
  // SystemExit): the workers "succeed", the job was stopped.
  ChildProcess job(concat({kDdprun, "--nproc_per_node=2"}, lightning(dir, {"--hold-at-epoch=1"})),
                   pythonEnv());
  ASSERT_TRUE(waitForFiles({dir / "started-1.0", dir / "started-1.1"}, 120s)) << job.stderrText();
  job.signal(SIGTERM);
  const auto code = job.wait(120s);
  const std::string out = job.stdoutText();
  const std::string err = job.stderrText();
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 128 + SIGTERM);
  EXPECT_NE((out + err).find("Received SIGTERM"), std::string::npos)
      << out << err;  // Lightning's handler ran
  EXPECT_EQ(out.find("weights"), std::string::npos) << out;
  // A rank that dies: the job fails with its code, whatever the stopped
  // survivor's Lightning exits with.
  const auto killed =
      ddprun(concat({"--nproc_per_node=2"}, lightning(dir / "killed", {"--die-at-epoch=1"})));
  EXPECT_EQ(killed.code, 128 + SIGKILL) << killed.err;
  EXPECT_NE(killed.err.find("rank       : 1"), std::string::npos) << killed.err;
}

TEST(Lightning, PreloadGivesEveryRankItsOwnRank) {
  const fs::path dir = scratch();
  const auto r = ddprun(
      concat({"--nproc_per_node=2", "--preload=torch,lightning"}, lightning(dir, {"--epochs=1"})));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("Preloaded torch, lightning"), std::string::npos) << r.err;
  // What Lightning computed at import, in the zygote, is each rank's own.
  EXPECT_NE(r.out.find("rank 0 imported with rank_zero_only.rank=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 imported with rank_zero_only.rank=1"), std::string::npos) << r.out;
}

TEST(Lightning, AutoDevicesOnCpuIsNamed) {
  const fs::path dir = scratch();
  // Trainer(accelerator="cpu") with strategy and devices "auto": one device
  // per process, so every rank trains alone, without a word from Lightning.
  const auto r =
      ddprun(concat({"--nproc_per_node=2"}, lightning(dir, {"--auto-devices", "--epochs=1"})));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("formed no process group"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("give Trainer(devices=2, num_nodes=1)"), std::string::npos) << r.err;
}

// --- NequIP --------------------------------------------------------------

const fs::path kNequipTrain = fs::path(DDPRUN_SOURCE_DIR) / "examples/nequip/train.sh";

// examples/nequip/train.sh's environment: nequip-train on PATH, its runs
// under `runDir`.
std::map<std::string, std::string> nequipEnv(const fs::path& runDir) {
  const char* path = std::getenv("PATH");
  return {{"PATH", kVenvBin + ":" + (path != nullptr ? path : "/usr/bin:/bin")},
          {"RUN_DIR", runDir.string()}};
}

std::string readText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// NequIP's validation (and training) metrics of an attempt, as its CSV
// logger wrote them (rank 0).
std::string metricsOf(const fs::path& runDir, int attempt = 0) {
  return readText(runDir / fmt::format("attempt_{}", attempt) / "csv" / "metrics.csv");
}

void expectTorchrunsMetrics(const std::vector<std::string>& overrides) {
  const fs::path dir = scratch();
  const auto ours = ddprun(concat({"--nproc_per_node=2", kNequipTrain.string()}, overrides),
                           nequipEnv(dir / "ddprun"));
  ASSERT_EQ(ours.code, 0) << ours.err;
  const auto theirs =
      torchrun(concat({"--standalone", "--nproc_per_node=2", "--no-python", kNequipTrain.string()},
                      overrides),
               nequipEnv(dir / "torchrun"));
  ASSERT_EQ(theirs.code, 0) << theirs.err;
  EXPECT_NE(ours.out.find("Starting with 2 processes"), std::string::npos) << ours.out;
  // The strategy asked for is the one that ran (Hydra's resolved config).
  const std::string config = readText(dir / "ddprun/attempt_0/.hydra/config.yaml");
  for (const auto& override : overrides) {
    EXPECT_NE(config.find(override.substr(override.find('=') + 1)), std::string::npos) << config;
  }
  const std::string metrics = metricsOf(dir / "ddprun");
  EXPECT_NE(metrics.find("val0_epoch/weighted_sum"), std::string::npos) << metrics;
  EXPECT_EQ(metrics, metricsOf(dir / "torchrun"));
}

TEST(NequIP, LightningsDdpHasTorchrunsMetrics) { expectTorchrunsMetrics({}); }

TEST(NequIP, SimpleDdpStrategyHasTorchrunsMetrics) {
  expectTorchrunsMetrics({"trainer.strategy._target_=nequip.train.SimpleDDPStrategy"});
}

TEST(NequIP, AKilledRankResumesFromItsLastCheckpoint) {
  const fs::path dir = scratch();
  const auto whole =
      ddprun({"--nproc_per_node=2", kNequipTrain.string()}, nequipEnv(dir / "whole"));
  ASSERT_EQ(whole.code, 0) << whole.err;
  // The last rank is SIGKILLed when epoch 2 starts (tests/integration/
  // frameworks/nequip_kill.yaml); the restarted train.sh finds last.ckpt.
  const auto killed = ddprun({"--nproc_per_node=2", "--max_restarts=1", kNequipTrain.string(),
                              "-cd", kScripts.string(), "-cn", "nequip_kill"},
                             nequipEnv(dir / "killed"));
  ASSERT_EQ(killed.code, 0) << killed.err;
  EXPECT_NE(killed.out.find("rank 1 kills itself at epoch 2"), std::string::npos) << killed.out;
  EXPECT_NE(killed.err.find("Restarting the worker group (restart 1 of 1)"), std::string::npos)
      << killed.err;
  EXPECT_NE((killed.out + killed.err)
                .find("Restored all states from the checkpoint at " +
                      (dir / "killed/checkpoints/last.ckpt").string()),
            std::string::npos);
  // The resumed attempt trained epochs 2 and 3 exactly as the whole run did.
  const std::string resumed = metricsOf(dir / "killed", 1);
  const std::string reference = metricsOf(dir / "whole");
  std::istringstream lines(resumed);
  std::string line;
  std::getline(lines, line);  // the header
  int rows = 0;
  while (std::getline(lines, line)) {
    EXPECT_TRUE(line.starts_with("2,") || line.starts_with("3,")) << line;
    EXPECT_NE(reference.find(line + "\n"), std::string::npos) << line;
    ++rows;
  }
  EXPECT_GT(rows, 0) << resumed;
}

// --- Accelerate and plain scripts --------------------------------------------

void expectTorchrunsWeights(const std::string& script) {
  const auto ours = ddprun({"--nproc_per_node=2", (kScripts / script).string()});
  ASSERT_EQ(ours.code, 0) << ours.err;
  // The reference. Under torchrun 2.13 a worker sometimes aborts at exit on
  // a loaded machine ("terminate called without an active exception",
  // SIGABRT, seen once in five loaded runs): the oracle failing, not
  // ddprun. That failure alone is run again (twice at most), saying so.
  RunResult theirs;
  for (int run = 0; run < 3; ++run) {
    theirs = torchrun({"--standalone", "--nproc_per_node=2", (kScripts / script).string()});
    if (theirs.code == 0 ||
        theirs.err.find("terminate called without an active exception") == std::string::npos) {
      break;
    }
    std::cerr << "torchrun's reference run aborted in PyTorch (exit " << theirs.code
              << "); running it again\n";
  }
  ASSERT_EQ(theirs.code, 0) << theirs.err;
  EXPECT_NE(weightsIn(ours.out), "<no weights line>") << ours.out;
  EXPECT_EQ(weightsIn(ours.out), weightsIn(theirs.out));
}

TEST(Accelerate, AcceleratorTrainsTheSameWeightsAsUnderTorchrun) {
  expectTorchrunsWeights("accelerate_train.py");
}

// Runs `script DIR` on 2 ranks undisturbed, then with `kill` set (a rank
// dies after a checkpoint) and one restart: the restart resumes (rank 0
// prints `resumed`) and ends with the undisturbed run's weights.
void expectARestartResumesToTheSameWeights(const std::string& script, const std::string& kill,
                                           const std::string& resumed) {
  const auto path = (kScripts / script).string();
  const auto plain =
      ddprun({"--nproc_per_node=2", "--log_prefix=", path, (scratch() / "undisturbed").string()});
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto again = ddprun({"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", path,
                             (scratch() / "killed").string()},
                            {{kill, "1"}});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find(resumed), std::string::npos) << again.out;
  EXPECT_NE(again.err.find("Preloaded torch"), std::string::npos) << again.err;
  EXPECT_NE(weightsIn(plain.out), "<no weights line>") << plain.out;
  EXPECT_EQ(weightsIn(again.out), weightsIn(plain.out));
}

// Under the default (workers forked from the zygote): a rank killed after a
// checkpoint of torch.distributed.checkpoint (DCP), or of Hugging Face's
// Trainer (its own get_last_checkpoint); the restart loads it.
TEST(Dcp, ARestartResumesFromTheLastCheckpointWithTheSameWeights) {
  fs::create_directories(scratch() / "undisturbed");
  fs::create_directories(scratch() / "killed");
  expectARestartResumesToTheSameWeights("dcp_train.py", "DCP_TEST_KILL", "resumed from epoch 1");
}

TEST(HfTrainer, ARestartResumesFromTheLastCheckpointWithTheSameWeights) {
  expectARestartResumesToTheSameWeights("hf_trainer_train.py", "HF_TEST_KILL",
                                        "resumed from checkpoint-8");
}

TEST(PlainScripts, TheTorchrunPatternTrainsTheSameWeightsAsUnderTorchrun) {
  expectTorchrunsWeights("plain_ddp.py");
}

TEST(PlainScripts, ASpawnScriptOnAPortItChoseWorks) {
  // torch.multiprocessing.spawn with MASTER_ADDR/MASTER_PORT set by the
  // script: its rank 0 hosts the store (torchrun 2.13 hangs here: it tells
  // every rank that the agent hosts the store).
  const auto r = ddprun({(kScripts / "spawn_fixed_port.py").string(), std::to_string(freePort())});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("spawned rank 1 of 2: sum 3"), std::string::npos) << r.out;
}

TEST(PlainScripts, ASpawnScriptOnATakenPortFailsWithAClearReport) {
  // Another process listens on the port the script chose.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t length = sizeof address;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const std::string port = std::to_string(ntohs(address.sin_port));
  const auto r = ddprun({(kScripts / "spawn_fixed_port.py").string(), port});
  ::close(listener);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("EADDRINUSE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint       : port " + port + " is taken by another process"),
            std::string::npos)
      << r.err;
}

// --- torchft ----------------------------------------------------------------

// torchft's lighthouse (the wheel's own binary) on a free port, once it says
// it listens; the replicas find it through TORCHFT_LIGHTHOUSE.
std::unique_ptr<ChildProcess> startLighthouse(std::uint16_t port) {
  // Its log goes to stderr: through stdout, the test reads it line by line.
  auto lighthouse = std::make_unique<ChildProcess>(std::vector<std::string>{
      "/bin/sh", "-c",
      fmt::format("exec {}/torchft_lighthouse --min_replicas 1 --join_timeout_ms 1000 "
                  "--bind 127.0.0.1:{} 2>&1",
                  kVenvBin, port)});
  std::string said;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (said.find("Lighthouse listening on") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const auto line = left.count() > 0 ? lighthouse->readStdoutLine(left) : std::nullopt;
    if (!line) break;  // the deadline passed, or the lighthouse exited
    said += *line + "\n";
  }
  EXPECT_NE(said.find("Lighthouse listening on"), std::string::npos) << said;
  return lighthouse;
}

std::string checksumIn(const std::string& out) {
  const auto at = out.find("torchft committed step 3: checksum ");
  return at == std::string::npos ? "<no checksum line>" : out.substr(at, out.find('\n', at) - at);
}

TEST(Torchft, OneWorkerPerReplicaGroupTrainsAsUnderTorchrun) {
  // torchft's README: one worker per replica group. Its Manager is a
  // TCPStore client of MASTER_ADDR:MASTER_PORT; a one-worker job whose
  // worker was to host its own store left nobody serving there, and the
  // job hung.
  RunResult results[2];
  for (int launcher = 0; launcher < 2; ++launcher) {
    const std::uint16_t port = freePort();
    const auto lighthouse = startLighthouse(port);
    const std::map<std::string, std::string> env = {
        {"TORCHFT_LIGHTHOUSE", fmt::format("http://127.0.0.1:{}", port)}};
    const std::vector<std::string> args = {"--nproc_per_node=1",
                                           (kScripts / "torchft_train.py").string()};
    results[launcher] = launcher == 0 ? ddprun(args, env) : torchrun(args, env);
  }
  ASSERT_EQ(results[0].code, 0) << results[0].err;
  ASSERT_EQ(results[1].code, 0) << results[1].err;
  EXPECT_NE(checksumIn(results[0].out), "<no checksum line>") << results[0].out;
  EXPECT_EQ(checksumIn(results[0].out), checksumIn(results[1].out));
}

// --- Hang reports with Python stacks (py-spy) ----------------------------

TEST(PythonStacks, TheHangReportShowsTheHungRanksPythonStack) {
  // py-spy is in the workers' environment, not on ddprun's PATH: found
  // beside the worker's interpreter.
  const auto r = ddprun({"--watchdog_timeout=2", (kScripts / "hang.py").string()},
                        {{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("hung: no worker of this node made progress"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("python:     wait_for_a_peer_that_never_comes (hang.py:"), std::string::npos)
      << r.err;
}

TEST(PythonStacks, WithoutPySpyTheReportSaysHowToGetOne) {
  const auto r = ddprun({"--watchdog_timeout=2", (kScripts / "hang.py").string()},
                        {{"PATH", "/usr/bin:/bin"}, {"PYTHON_EXEC", "/usr/bin/python3"}});
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("python: no py-spy to read its Python stack"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("`pip install py-spy`"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ddprun
