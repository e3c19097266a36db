// ddprun under a real Slurm 22.05 cluster (harness/slurm_cluster.h):
// three nodes, each a network namespace with its own host name, jobs
// submitted with sbatch by an unprivileged user. The short form (everything
// from SLURM_*), torchrun's c10d recipe, and scancel leaving no process of
// the job on any node; Python workers of both PyTorches and NequIP's
// nequip-train across two nodes. One cluster for the whole binary (one ctest
// test).
#include <signal.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launcher_support.h"
#include "python_scripts.h"
#include "slurm_cluster.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::kBinDir;
using harness::SlurmCluster;
namespace fs = std::filesystem;

// The project's environment (the current PyTorch, Lightning, NequIP) and
// Debian's interpreter (PyTorch 1.13).
const std::string kVenvBin = DDPRUN_VENV_BIN;
const std::string kVenvPython = kVenvBin + "/python";
const std::string kDebianPython = "/usr/bin/python3";

// `text` as one single-quoted shell word.
std::string shellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Every process on the machine whose command line mentions `text`.
std::vector<pid_t> processesMentioning(const std::string& text) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream file(entry.path() / "cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(file)), {});
    if (cmdline.find(text) != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

std::string describe(const SlurmCluster::JobResult& job) {
  return fmt::format("state {} exit {}:{}\nrecord: {}\noutput:\n{}", job.state, job.exitCode,
                     job.signal, job.record, job.output);
}

// The text of `path` ("" when it does not exist yet).
std::string readFile(const fs::path& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), {});
}

// How many lines of `text` contain `word`.
std::size_t countLines(const std::string& text, const std::string& word) {
  std::size_t n = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) n += line.find(word) != std::string::npos;
  return n;
}

// One worker line, as the prefix [<host> rank <rank>]: gives it.
struct RankLine {
  std::string host;
  int rank = -1;
  std::string text;  // after the prefix
};
constexpr char kHostRankPrefix[] = "--log_line_prefix_template=[${hostname} rank ${rank}]: ";

// The worker lines of `output` (with kHostRankPrefix) that contain `word`.
std::vector<RankLine> rankLines(const std::string& output, const std::string& word) {
  static const std::regex prefix(R"(^\[(\S+) rank (\d+)\]: (.*)$)");
  std::vector<RankLine> lines;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    std::smatch m;
    if (line.find(word) == std::string::npos || !std::regex_match(line, m, prefix)) continue;
    lines.push_back({m[1], std::stoi(m[2]), m[3]});
  }
  return lines;
}

class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SlurmCluster::unavailable()) return;
    const auto start = std::chrono::steady_clock::now();
    try {
      cluster_ = new SlurmCluster();
    } catch (const std::exception& e) {
      error_ = e.what();
      return;
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::cout << fmt::format("[ cluster  ] {} nodes up in {:.1f} s\n", cluster_->nodes(),
                             took.count());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    if (const auto why = SlurmCluster::unavailable()) {
      GTEST_SKIP() << "no Slurm cluster on this machine: " << *why;
    }
    ASSERT_NE(cluster_, nullptr) << error_;
    folder_ = cluster_->jobFolder(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ddprun_ = cluster_->jobBinary(kBinDir + "/ddprun");
    trainMlp_ = cluster_->jobBinary(kBinDir + "/train_mlp");
  }
  // A test that failed half-way leaves no job for the next one.
  void TearDown() override {
    if (cluster_ == nullptr) return;
    EXPECT_TRUE(cluster_->cancelAllAndWaitIdle(120s)) << "the cluster did not return to idle\n"
                                                      << cluster_->logTails();
  }

  // A worker (a shell script in the job folder) that leaves its pid in
  // marks/<host>-<local rank>, notes each SIGUSR1 and SIGTERM it receives
  // in signals/<host>-<local rank>, says where it runs, and waits until the
  // test creates the file STOP; `onTerm` is what it does after noting a
  // SIGTERM (exit 0, or nothing: it trains on).
  std::string worker(const std::string& onTerm = "exit 0") {
    for (const char* dir : {"marks", "signals"}) {
      fs::create_directories(folder_ / dir);
      fs::permissions(folder_ / dir, fs::perms::all);
    }
    const fs::path path = folder_ / "worker.sh";
    std::ofstream(path) << fmt::format(
        "#!/bin/sh\n"
        "me=$(hostname)-$LOCAL_RANK\n"
        "trap 'echo USR1 >> {0}/signals/$me' USR1\n"
        "trap 'echo TERM >> {0}/signals/$me; {1}' TERM\n"
        "echo \"rank $RANK of $WORLD_SIZE on $(hostname)\"\n"
        "echo $$ > {0}/marks/.$me && mv {0}/marks/.$me {0}/marks/$me\n"
        "while [ ! -e {0}/STOP ]; do sleep 0.1; done\n"
        "echo \"worker rank $RANK done\"\n",
        folder_.string(), onTerm);
    fs::permissions(path, fs::perms::all);
    return path.string();
  }
  // Waits until `count` workers left their mark (job `id` still starting or
  // running); their pids.
  std::vector<pid_t> waitForWorkers(int id, std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 3min;
    std::vector<pid_t> pids;
    while (std::chrono::steady_clock::now() < deadline) {
      pids.clear();
      for (const auto& entry : fs::directory_iterator(folder_ / "marks")) {
        if (entry.path().filename().string().starts_with(".")) continue;
        pid_t pid = 0;
        std::ifstream(entry.path()) >> pid;
        pids.push_back(pid);
      }
      if (pids.size() >= count) break;
      const std::string state = cluster_->jobState(id);
      if (state != "PENDING" && state != "CONFIGURING" && state != "RUNNING" && !state.empty()) {
        ADD_FAILURE() << "job " << id << " is " << state << "\n" << output(id);
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    return pids;
  }
  std::string output(int id) const { return readFile(folder_ / fmt::format("slurm-{}.out", id)); }
  // Waits until the job's output has `count` lines containing `text`.
  bool waitForOutput(int id, const std::string& text, std::size_t count) const {
    const auto deadline = std::chrono::steady_clock::now() + 2min;
    while (countLines(output(id), text) < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(100ms);
    }
    return true;
  }
  void stopWorkers() const { std::ofstream(folder_ / "STOP") << "1"; }

  // One line per signal `name` the worker on `host` with `localRank` got.
  std::size_t signalsOf(const std::string& host, int localRank, const std::string& name) const {
    return countLines(readFile(folder_ / "signals" / fmt::format("{}-{}", host, localRank)), name);
  }

  // Runs `script` (train_mlp --steps 20 on 2 nodes x 2 workers) to its end:
  // COMPLETED, exit code 0, rank 0 reporting the whole group, 20 steps and
  // a final checksum.
  SlurmCluster::JobResult trainMlpOnTwoNodes(const std::string& script) {
    const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
    const auto job = cluster_->waitForJob(id, 5min);
    EXPECT_TRUE(job.finished) << describe(job);
    EXPECT_EQ(job.state, "COMPLETED") << describe(job);
    EXPECT_EQ(job.exitCode, 0) << describe(job);
    EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(training on 4 rank\(s\))")))
        << describe(job);
    EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(step 20/20 loss [0-9.]+)")))
        << describe(job);
    EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(final checksum \S+)")))
        << describe(job);
    return job;
  }

  inline static SlurmCluster* cluster_ = nullptr;
  inline static std::string error_;
  fs::path folder_;
  std::string ddprun_;
  std::string trainMlp_;
};

TEST_F(Slurm, ShortFormTrainsOnTwoNodes) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "echo \"batch on $(hostname): $SLURM_JOB_NODELIST\"\n"
      "exec srun --ntasks-per-node=1 {} --nproc_per_node=2 {} --steps 20 --log_every 5\n",
      ddprun_, trainMlp_);
  const auto job = trainMlpOnTwoNodes(script);
  // The batch script runs on the allocation's first node, under its own name.
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(batch on node(\d): node\[\1[-,]\d\])")))
      << describe(job);
}

TEST_F(Slurm, TorchrunRecipeWithC10d) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "echo \"rendezvous at $head:29400\"\n"
      "exec srun --ntasks-per-node=1 {} --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d "
      "--rdzv_endpoint=$head:29400 --rdzv_id=$SLURM_JOB_ID {} --steps 20 --log_every 5\n",
      ddprun_, trainMlp_);
  const auto job = trainMlpOnTwoNodes(script);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(rendezvous at node\d:29400)")))
      << describe(job);
}

TEST_F(Slurm, ScancelLeavesNothingBehind) {
  // Each worker leaves its pid in marks/ and becomes a train_mlp that trains
  // (practically) forever.
  const fs::path marks = folder_ / "marks";
  fs::create_directories(marks);
  fs::permissions(marks, fs::perms::all);
  const fs::path worker = folder_ / "worker.sh";
  std::ofstream(worker) << fmt::format(
      "#!/bin/sh\n"
      "echo $$ > {0}/.$(hostname)-$LOCAL_RANK && mv {0}/.$(hostname)-$LOCAL_RANK "
      "{0}/$(hostname)-$LOCAL_RANK\n"
      "exec {1} --steps 1000000 --log_every 1\n",
      marks.string(), trainMlp_);
  fs::permissions(worker, fs::perms::all);
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "exec srun --ntasks-per-node=1 {} --nproc_per_node=2 {}\n",
      ddprun_, worker.string());
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);

  // The four workers run (each wrote its mark) and train (rank 0 logged a step).
  const std::vector<pid_t> workers = waitForWorkers(id, 4);
  ASSERT_EQ(workers.size(), 4u) << cluster_->jobState(id) << "\n" << output(id);
  ASSERT_TRUE(waitForOutput(id, "step 1/", 1)) << output(id);
  const std::vector<pid_t> running = cluster_->userProcesses();
  for (const pid_t pid : workers) {
    ASSERT_TRUE(std::find(running.begin(), running.end(), pid) != running.end())
        << "worker " << pid << " is not a running process of " << SlurmCluster::kUser;
  }

  const auto cancelled = cluster_->cancel(id);
  ASSERT_EQ(cancelled.code, 0) << cancelled.output;
  const auto job = cluster_->waitForJob(id, 2min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "CANCELLED") << describe(job);

  // Slurm signals every process of the step (SIGTERM, then SIGKILL after
  // KillWait=30 s): within 2 minutes no process of the job may be left, on
  // any node (the user's processes in the cluster's namespaces) or anywhere
  // on the machine (a command line naming the job's folder).
  const auto left = std::chrono::steady_clock::now() + 2min;
  while ((!cluster_->userProcesses().empty() || !processesMentioning(folder_.string()).empty()) &&
         std::chrono::steady_clock::now() < left) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(cluster_->userProcesses(), std::vector<pid_t>{});
  EXPECT_EQ(processesMentioning(folder_.string()), std::vector<pid_t>{});
  for (const pid_t pid : workers) {
    EXPECT_TRUE(harness::processGone(pid)) << "worker " << pid << " survived scancel";
  }
}

// A 3-node job (the form README gives) loses node2's ddprun to SIGKILL: a
// task of a Slurm step never comes back, so the survivors end the job at
// once (not at the join timeout, 600 s, nor the 3-minute time limit),
// naming the lost node, its host and its node rank, in their output and
// their error files; --kill-on-bad-exit is not needed. Each ddprun's
// stderr goes to a file of its own: srun, which force-terminates the step
// once a task is killed, dropped the survivors' last lines in one CI run
// (their error files had the report).
TEST_F(Slurm, ALostNodeEndsTheJobAndIsNamed) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "exec srun --ntasks-per-node=1 sh -c 'echo $$ > {0}/marks/ddprun-$SLURM_NODEID.pid; "
      "TORCHELASTIC_ERROR_FILE={0}/error-$SLURM_NODEID.json exec {1} --nnodes=3 "
      "--nproc_per_node=1 {2} 2>{0}/ddprun-$SLURM_NODEID.err'\n",
      folder_.string(), ddprun_, worker());
  const int id = cluster_->submit(script, {"-N3", "--time=3"}, folder_);
  ASSERT_EQ(waitForWorkers(id, 6).size(), 6u);  // three agents, three workers
  pid_t lost = 0;
  std::ifstream(folder_ / "marks" / "ddprun-1.pid") >> lost;
  ASSERT_GT(lost, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(lost, SIGKILL), 0);
  const auto job = cluster_->waitForJob(id, 5min);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << fmt::format("[ measured ] the job ended {:.1f} s after the loss\n", took.count());
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "FAILED") << describe(job);
  for (const int survivor : {0, 2}) {
    const std::string printed = readFile(folder_ / fmt::format("ddprun-{}.err", survivor));
    EXPECT_NE(printed.find("the job lost a node: node node2:"), std::string::npos)
        << "node rank " << survivor << " printed:\n"
        << printed << describe(job);
    EXPECT_NE(printed.find(", node rank 1, lost ("), std::string::npos) << printed;
    const std::string error = readFile(folder_ / fmt::format("error-{}.json", survivor));
    EXPECT_NE(error.find("node node2:"), std::string::npos) << survivor << ": " << error;
    EXPECT_NE(error.find("fewer than the minimum of 3"), std::string::npos) << error;
  }
}

// Slurm's early warning (#SBATCH --signal=USR1@T; here scancel --signal,
// the same delivery to every process of every step) reaches each worker
// once, and the job trains on to a normal end.
TEST_F(Slurm, TheEarlyWarningReachesEachWorkerOnceAndTrainingGoesOn) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "exec srun --ntasks-per-node=1 {} --nproc_per_node=2 {}\n",
      ddprun_, worker());
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  ASSERT_EQ(waitForWorkers(id, 4).size(), 4u);
  ASSERT_EQ(cluster_->signal(id, SIGUSR1).code, 0);
  // Both agents decided (they forward nothing), and every worker noted it.
  ASSERT_TRUE(waitForOutput(id, "Slurm sent SIGUSR1 to the job step", 2)) << output(id);
  const auto deadline = std::chrono::steady_clock::now() + 1min;
  auto noted = [&] {
    std::size_t n = 0;
    for (int host = 0; host < 2; ++host) {
      for (int rank = 0; rank < 2; ++rank)
        n += signalsOf(SlurmCluster::nodeName(host), rank, "USR1") > 0;
    }
    return n;
  };
  while (noted() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  stopWorkers();
  const auto job = cluster_->waitForJob(id, 3min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  EXPECT_EQ(countLines(job.output, "worker rank "), 4u) << describe(job);
  for (int host = 0; host < 2; ++host) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(signalsOf(SlurmCluster::nodeName(host), rank, "USR1"), 1u)
          << SlurmCluster::nodeName(host) << " local rank " << rank;
    }
  }
}

// scancel: each worker gets Slurm's SIGTERM once (ddprun does not forward
// it again); a worker that ignores it is killed by ddprun's own escalation
// (20 s under Slurm) before Slurm's KillWait (30 s), so ddprun's last lines
// reach the job's output.
TEST_F(Slurm, ScancelSignalsEachWorkerOnceAndDdprunFinishesFirst) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "exec srun --ntasks-per-node=1 {} --nproc_per_node=2 {}\n",
      ddprun_, worker("[ $LOCAL_RANK = 1 ] || exit 0"));
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  ASSERT_EQ(waitForWorkers(id, 4).size(), 4u);
  ASSERT_EQ(cluster_->cancel(id).code, 0);
  const auto job = cluster_->waitForJob(id, 3min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "CANCELLED") << describe(job);
  for (int host = 0; host < 2; ++host) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(signalsOf(SlurmCluster::nodeName(host), rank, "TERM"), 1u)
          << SlurmCluster::nodeName(host) << " local rank " << rank;
    }
  }
  // Output written after the job's end state may still be on its way.
  ASSERT_TRUE(waitForOutput(id, "did not exit within 20000 ms; sending SIGKILL", 2)) << output(id);
  EXPECT_EQ(countLines(output(id), "Slurm sent SIGTERM to the job step, the workers included"), 2u)
      << output(id);
}

// Rank 0 is on the first host of the step's node list in a c10d job too,
// even when that node's agent joins last.
TEST_F(Slurm, RankZeroIsOnTheFirstNodeOfTheStep) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "echo \"first host $head\"\n"
      "exec srun --ntasks-per-node=1 sh -c '[ $SLURM_NODEID = 0 ] && sleep 2; exec {} --nnodes=2 "
      "--nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint='$head':29400 "
      "--rdzv_id=$SLURM_JOB_ID {}'\n",
      ddprun_, worker());
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  ASSERT_EQ(waitForWorkers(id, 4).size(), 4u);
  stopWorkers();
  const auto job = cluster_->waitForJob(id, 3min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output, m, std::regex(R"(first host (\S+))"))) << job.output;
  EXPECT_NE(job.output.find("rank 0 of 4 on " + m[1].str()), std::string::npos) << describe(job);
  EXPECT_NE(job.output.find("rank 1 of 4 on " + m[1].str()), std::string::npos) << describe(job);
}

// ddprun alone in a batch script (no srun) starts one ddprun per node of
// the allocation through srun and returns the job's exit code.
TEST_F(Slurm, OneCommandInABatchScriptRunsOnEveryNode) {
  const std::string script =
      fmt::format("#!/bin/sh\n{} --nproc_per_node=2 {}\n", ddprun_, worker());
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  ASSERT_EQ(waitForWorkers(id, 4).size(), 4u);
  stopWorkers();
  const auto job = cluster_->waitForJob(id, 3min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  EXPECT_EQ(job.exitCode, 0) << describe(job);
  EXPECT_NE(job.output.find("ddprun: one ddprun per node of the Slurm allocation: "),
            std::string::npos)
      << describe(job);
  for (int host = 0; host < 2; ++host) {
    EXPECT_EQ(countLines(job.output, "of 4 on " + SlurmCluster::nodeName(host)), 2u)
        << describe(job);
  }
  // A failing job's code is the batch script's.
  const int failing = cluster_->submit(
      fmt::format("#!/bin/sh\n{} --nproc_per_node=2 /bin/sh -c 'exit 3'\n", ddprun_),
      {"-N2", "--time=10"}, cluster_->jobFolder("failing"));
  const auto failed = cluster_->waitForJob(failing, 3min);
  ASSERT_TRUE(failed.finished) << describe(failed);
  EXPECT_EQ(failed.state, "FAILED") << describe(failed);
  EXPECT_EQ(failed.exitCode, 3) << describe(failed);
}

// kDdpTrainScript (60 steps of a 2-rank DDP regression) as the short form
// runs it, 2 nodes x 2 workers, under Debian's PyTorch 1.13 and under the
// project's current PyTorch (PYTHON_EXEC): the loss falls on every rank and
// the 4 replicas end identical.
TEST_F(Slurm, PythonDdpUnderBothPyTorches) {
  const fs::path script = folder_ / "ddp_train.py";
  std::ofstream(script) << harness::kDdpTrainScript;
  fs::permissions(script, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  const std::vector<std::pair<std::string, std::string>> pythons = {
      {kDebianPython, R"(torch 1\.13\.)"}, {kVenvPython, R"(torch [2-9]\.)"}};
  for (const auto& [python, version] : pythons) {
    SCOPED_TRACE(python);
    const std::string cannot = cluster_->letUserRunPython(python);
    ASSERT_EQ(cannot, "") << "(scripts/setup makes the environments)";
    const std::string batch = fmt::format(
        "#!/bin/sh\n"
        "export PYTHON_EXEC={0} OMP_NUM_THREADS=1\n"
        "$PYTHON_EXEC -c 'import torch; print(\"torch\", torch.__version__)'\n"
        "exec srun --ntasks-per-node=1 {1} --nproc_per_node=2 {2} ddp_train.py\n",
        shellQuote(python), ddprun_, shellQuote(kHostRankPrefix));
    const auto start = std::chrono::steady_clock::now();
    const int id = cluster_->submit(batch, {"-N2", "--time=10"}, folder_);
    const auto job = cluster_->waitForJob(id, 5min);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::cout << fmt::format("[ measured ] {}: the job took {:.1f} s\n", python, took.count());
    ASSERT_TRUE(job.finished) << describe(job);
    EXPECT_EQ(job.state, "COMPLETED") << describe(job);
    EXPECT_EQ(job.exitCode, 0) << describe(job);
    EXPECT_TRUE(std::regex_search(job.output, std::regex(version))) << describe(job);
    // Every rank's loss falls tenfold; ranks 0-1 on one node, 2-3 on the other.
    std::map<int, std::string> hostOf;
    std::map<int, double> first;
    for (const auto& line : rankLines(job.output, "step 0 loss ")) {
      first[line.rank] = std::stod(line.text.substr(line.text.rfind(' ') + 1));
      hostOf[line.rank] = line.host;
    }
    const auto last = rankLines(job.output, "step 59 loss ");
    ASSERT_EQ(first.size(), 4u) << describe(job);
    ASSERT_EQ(last.size(), 4u) << describe(job);
    for (const auto& line : last) {
      ASSERT_TRUE(first.contains(line.rank)) << describe(job);
      EXPECT_LT(std::stod(line.text.substr(line.text.rfind(' ') + 1)), first[line.rank] / 10)
          << "rank " << line.rank << "\n"
          << describe(job);
    }
    EXPECT_EQ(hostOf[0], hostOf[1]) << describe(job);
    EXPECT_EQ(hostOf[2], hostOf[3]) << describe(job);
    EXPECT_NE(hostOf[0], hostOf[2]) << describe(job);
    // DDP kept the 4 replicas identical.
    const auto sums = rankLines(job.output, "checksum ");
    ASSERT_EQ(sums.size(), 4u) << describe(job);
    for (const auto& sum : sums) EXPECT_EQ(sum.text, sums[0].text) << describe(job);
  }
}

// NequIP's nequip-train (Lightning's DDP, gloo) on 2 nodes, one worker each
// (examples/nequip/tiny.yaml with devices=1, num_nodes=2): both ranks, one
// per node, train in one process group, which halves the steps per epoch.
TEST_F(Slurm, NequipTrainsOnTwoNodes) {
  const std::string cannot = cluster_->letUserRunPython(kVenvPython);
  ASSERT_EQ(cannot, "") << "(scripts/setup makes the environment)";
  const fs::path config = folder_ / "tiny.yaml";
  fs::copy_file(fs::path(DDPRUN_SOURCE_DIR) / "examples/nequip/tiny.yaml", config,
                fs::copy_options::overwrite_existing);
  fs::permissions(config, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  const fs::path run = folder_ / "run";
  const std::string batch = fmt::format(
      "#!/bin/sh\n"
      "export OMP_NUM_THREADS=1\n"
      "exec srun --ntasks-per-node=1 {0} --nproc_per_node=1 {1} --no_python {2} -cp {3} -cn tiny "
      "hydra.run.dir={4} trainer.devices=1 trainer.num_nodes=2\n",
      ddprun_, shellQuote(kHostRankPrefix), shellQuote(kVenvBin + "/nequip-train"),
      shellQuote(folder_.string()), shellQuote(run.string()));
  const auto start = std::chrono::steady_clock::now();
  const int id = cluster_->submit(batch, {"-N2", "--time=10"}, folder_);
  const auto job = cluster_->waitForJob(id, 8min);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << fmt::format("[ measured ] the NequIP job took {:.1f} s\n", took.count());
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  EXPECT_EQ(job.exitCode, 0) << describe(job);
  // Lightning's process group: rank 0 and rank 1, each on its own node.
  const auto members = rankLines(job.output, "Initializing distributed: GLOBAL_RANK: ");
  ASSERT_EQ(members.size(), 2u) << describe(job);
  std::map<int, std::string> hostOf;
  for (const auto& member : members) {
    EXPECT_NE(member.text.find(
                  fmt::format("GLOBAL_RANK: {0}, MEMBER: {1}/2", member.rank, member.rank + 1)),
              std::string::npos)
        << describe(job);
    hostOf[member.rank] = member.host;
  }
  ASSERT_TRUE(hostOf.contains(0) && hostOf.contains(1)) << describe(job);
  EXPECT_NE(hostOf[0], hostOf[1]) << describe(job);
  EXPECT_NE(job.output.find("Starting with 2 processes"), std::string::npos) << describe(job);
  EXPECT_NE(job.output.find("`Trainer.fit` stopped: `max_epochs=4` reached."), std::string::npos)
      << describe(job);
  EXPECT_EQ(job.output.find("formed no process group"), std::string::npos) << describe(job);
  // Rank 0's metrics: each epoch's 12 training frames were shared by the
  // two ranks, 2 per batch: 3 steps an epoch (6 for one rank alone), and a
  // validation result every epoch.
  const std::string metrics = readFile(run / "csv" / "metrics.csv");
  std::istringstream rows(metrics);
  std::string header;
  std::getline(rows, header);
  auto cells = [](std::string row) {
    if (row.ends_with("\r")) row.pop_back();  // Python's csv ends rows with \r\n
    std::vector<std::string> parts;
    std::istringstream stream(row);
    for (std::string cell; std::getline(stream, cell, ',');) parts.push_back(cell);
    if (row.ends_with(",")) parts.emplace_back();
    return parts;
  };
  const auto names = cells(header);
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  const std::size_t stepLoss = column("train_loss_step/weighted_sum");
  const std::size_t validation = column("val0_epoch/weighted_sum");
  ASSERT_LT(stepLoss, names.size()) << metrics;
  ASSERT_LT(validation, names.size()) << metrics;
  std::map<std::string, int> stepsPerEpoch;
  int validations = 0;
  for (std::string row; std::getline(rows, row);) {
    const auto values = cells(row);
    ASSERT_EQ(values.size(), names.size()) << row;
    stepsPerEpoch[values[0]] += !values[stepLoss].empty();
    validations += !values[validation].empty();
  }
  EXPECT_EQ(stepsPerEpoch, (std::map<std::string, int>{{"0", 3}, {"1", 3}, {"2", 3}, {"3", 3}}))
      << metrics;
  EXPECT_EQ(validations, 4) << metrics;
}

}  // namespace
}  // namespace ddprun
