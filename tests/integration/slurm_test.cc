// ddprun under a real Slurm 22.05 cluster (tests/support/slurm_cluster.h):
// three nodes, each a network namespace with its own host name, jobs
// submitted with sbatch by an unprivileged user. The short form (everything
// from SLURM_*), torchrun's c10d recipe, and scancel leaving no process of
// the job on any node. One cluster for the whole binary (one ctest test).
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
#include <vector>

#include "launcher_support.h"
#include "slurm_cluster.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using test_support::kBinDir;
using test_support::SlurmCluster;
namespace fs = std::filesystem;

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
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  const auto job = cluster_->waitForJob(id, 5min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  EXPECT_EQ(job.exitCode, 0) << describe(job);
  // Rank 0 (on the first node) reports the whole group: 2 nodes x 2 workers.
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(training on 4 rank\(s\))")))
      << describe(job);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(step 20/20 loss [0-9.]+)")))
      << describe(job);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(final checksum \S+)"))) << describe(job);
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
  const int id = cluster_->submit(script, {"-N2", "--time=10"}, folder_);
  const auto job = cluster_->waitForJob(id, 5min);
  ASSERT_TRUE(job.finished) << describe(job);
  EXPECT_EQ(job.state, "COMPLETED") << describe(job);
  EXPECT_EQ(job.exitCode, 0) << describe(job);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(rendezvous at node\d:29400)")))
      << describe(job);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(training on 4 rank\(s\))")))
      << describe(job);
  EXPECT_TRUE(std::regex_search(job.output, std::regex(R"(final checksum \S+)"))) << describe(job);
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
  const auto deadline = std::chrono::steady_clock::now() + 3min;
  auto countMarks = [&] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(marks)) {
      if (!entry.path().filename().string().starts_with(".")) ++n;
    }
    return n;
  };
  auto outputText = [&] {
    std::ifstream file(folder_ / fmt::format("slurm-{}.out", id));
    return std::string((std::istreambuf_iterator<char>(file)), {});
  };
  while ((countMarks() < 4 || outputText().find("step 1/") == std::string::npos) &&
         std::chrono::steady_clock::now() < deadline) {
    const std::string state = cluster_->jobState(id);
    ASSERT_TRUE(state == "PENDING" || state == "CONFIGURING" || state == "RUNNING" || state.empty())
        << state << "\n"
        << outputText();
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(countMarks(), 4) << cluster_->jobState(id) << "\n" << outputText();
  ASSERT_NE(outputText().find("step 1/"), std::string::npos) << outputText();
  std::vector<pid_t> workers;
  for (const auto& entry : fs::directory_iterator(marks)) {
    if (entry.path().filename().string().starts_with(".")) continue;
    pid_t pid = 0;
    std::ifstream(entry.path()) >> pid;
    workers.push_back(pid);
  }
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
    EXPECT_TRUE(test_support::processGone(pid)) << "worker " << pid << " survived scancel";
  }
}

// A 3-node job (the form README gives) loses node2's ddprun to SIGKILL: a
// task of a Slurm step never comes back, so the survivors end the job at
// once (not at the join timeout, 600 s, nor the 3-minute time limit),
// naming the lost node, its host and its node rank, in their output and
// their error files; --kill-on-bad-exit is not needed.
TEST_F(Slurm, ALostNodeEndsTheJobAndIsNamed) {
  const std::string script = fmt::format(
      "#!/bin/sh\n"
      "exec srun --ntasks-per-node=1 sh -c 'echo $$ > {0}/marks/ddprun-$SLURM_NODEID.pid; "
      "TORCHELASTIC_ERROR_FILE={0}/error-$SLURM_NODEID.json exec {1} --nnodes=3 "
      "--nproc_per_node=1 {2}'\n",
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
  EXPECT_NE(job.output.find("the job lost a node: node node2:"), std::string::npos)
      << describe(job);
  EXPECT_NE(job.output.find(", node rank 1, lost ("), std::string::npos) << describe(job);
  for (const char* survivor : {"error-0.json", "error-2.json"}) {
    const std::string error = readFile(folder_ / survivor);
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

}  // namespace
}  // namespace ddprun
