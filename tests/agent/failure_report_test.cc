#include "ddprun/agent/features/failure_report/failure_report.h"

#include <signal.h>

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

WorkerFailure failure() {
  WorkerFailure f;
  f.rank = 5;
  f.localRank = 1;
  f.nodeRank = 2;
  f.host = "node7";
  f.pid = 4121;
  f.status = ExitStatus{7, 0, false};
  f.time = std::chrono::system_clock::from_time_t(1700000000) + std::chrono::milliseconds(250);
  f.errorFile = "/logs/job/attempt_0/1/error.json";
  return f;
}

TEST(FailureReport, NamesEverythingAboutTheRootCause) {
  FailureSummary s;
  s.programName = "train.py";
  s.attempts = 1;
  s.rootCause = failure();
  s.rootCause.stderrTail = {"loading data", "RuntimeError: bad shape"};
  s.stoppedRanks = {4, 6};
  const std::string report = formatFailureReport(s);
  EXPECT_NE(report.find("train.py FAILED after 1 attempt"), std::string::npos) << report;
  EXPECT_NE(report.find("rank       : 5 (local_rank 1, node 2)"), std::string::npos);
  EXPECT_NE(report.find("host       : node7"), std::string::npos);
  EXPECT_NE(report.find("pid        : 4121"), std::string::npos);
  EXPECT_NE(report.find("exit       : 7"), std::string::npos);
  EXPECT_NE(report.find("time       : 2023-11-14 22:13:20.250 UTC"), std::string::npos) << report;
  EXPECT_NE(report.find("error_file : <none written>"), std::string::npos);
  EXPECT_NE(report.find("    RuntimeError: bad shape"), std::string::npos);
  EXPECT_NE(report.find("Stopped by ddprun after the failure: ranks 4, 6"), std::string::npos);
}

TEST(FailureReport, PrefersTheErrorFileAndShowsSignals) {
  FailureSummary s;
  s.programName = "train.py";
  s.attempts = 3;
  s.maxRestarts = 2;
  s.rootCause = failure();
  s.rootCause.status = ExitStatus{0, SIGSEGV, true};
  s.rootCause.error = WorkerError{"ValueError: boom", "Traceback (most recent call last):\n  x", 0};
  s.rootCause.stderrTail = {"should not be shown"};
  WorkerFailure earlier = failure();
  earlier.status = ExitStatus{1, 0, false};
  s.history.add(0, earlier);
  const std::string report = formatFailureReport(s);
  EXPECT_NE(report.find("exit       : SIGSEGV (signal 11; exit code 139)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("message    : ValueError: boom"), std::string::npos);
  EXPECT_NE(report.find("    Traceback (most recent call last):"), std::string::npos);
  EXPECT_EQ(report.find("should not be shown"), std::string::npos);
  EXPECT_NE(report.find("error_file : /logs/job/attempt_0/1/error.json"), std::string::npos);
  EXPECT_NE(report.find("Earlier attempts (1 failed):\n  attempt 0: worker rank 5"),
            std::string::npos);
  EXPECT_EQ(describeExit(s.rootCause),
            "worker rank 5 (local rank 1, pid 4121) was killed by SIGSEGV");
}

// However many attempts failed, the report lists the first, the last and
// how often each cause came, not every attempt.
TEST(FailureReport, TheHistoryOfManyRestartsIsBounded) {
  FailureSummary s;
  s.programName = "false";
  s.attempts = 301;
  s.maxRestarts = 300;
  s.rootCause = failure();
  for (int attempt = 0; attempt < 300; ++attempt) {
    WorkerFailure f = failure();
    f.status = ExitStatus{attempt == 7 ? 2 : 1, 0, false};
    s.history.add(attempt, f);
  }
  const std::string report = formatFailureReport(s);
  EXPECT_NE(report.find("Earlier attempts (300 failed):"), std::string::npos) << report;
  EXPECT_NE(report.find("first: attempt 0: worker rank 5"), std::string::npos) << report;
  EXPECT_NE(report.find("last:  attempt 299: worker rank 5"), std::string::npos) << report;
  EXPECT_NE(report.find("causes: rank 5 exit code 1 x299; rank 5 exit code 2 x1"),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("attempt 150:"), std::string::npos);
  EXPECT_LT(report.size(), 2000u);
}

TEST(ExitStatus, ShellConvention) {
  EXPECT_EQ((ExitStatus{3, 0, false}).shellCode(), 3);
  EXPECT_EQ((ExitStatus{0, 9, true}).shellCode(), 137);
  EXPECT_TRUE((ExitStatus{0, 0, false}).success());
  EXPECT_FALSE((ExitStatus{0, 15, true}).success());
}

// The words Gloo, NCCL and the store client use when the other end went
// away make a failure a knock-on; a signal, a plain error or a worker that
// ddprun stopped never is one.
TEST(WorkerFailure, AKnockOnFailureLostAPeer) {
  WorkerFailure f;
  f.status = ExitStatus{1, 0, false};
  f.stderrTail = {
      "chaos-train: rank 2 of 6: all_reduce(int64[1] on cpu, sum) failed: "
      "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.10.0.2]:428"};
  EXPECT_TRUE(lostAPeer(f));
  f.stderrTail = {"Traceback (most recent call last):",
                  "torch.distributed.DistBackendError: "
                  "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was "
                  "a network error, NCCL version 2.21.5"};
  EXPECT_TRUE(lostAPeer(f));
  f.stderrTail = {};
  f.error = WorkerError{
      "RuntimeError: [pair.cc:589] Read error [10.0.0.1]:1: Connection reset "
      "by peer",
      "", 0};
  EXPECT_TRUE(lostAPeer(f));
  f.cause = "the hang watchdog";  // ddprun stopped it: its own failure
  EXPECT_FALSE(lostAPeer(f));
  f.cause.clear();
  f.status = ExitStatus{0, 9, true};
  EXPECT_FALSE(lostAPeer(f));
  f.status = ExitStatus{1, 0, false};
  f.error = WorkerError{"ValueError: loss is NaN", "", 0};
  EXPECT_FALSE(lostAPeer(f));
}

}  // namespace
}  // namespace ddprun::agent
