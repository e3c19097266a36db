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

}  // namespace
}  // namespace ddprun
