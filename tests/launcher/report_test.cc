// `ddprun report`'s reading and wording (launcher/src/report) on event logs
// written here: two nodes' files merged into one run, each worker's lives
// per attempt, incidents and their phases, lines that are not events, and
// the page's lanes. tests/integration/downtime_test.cc renders a real run's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddprun/common/error.h"
#include "report/run_timeline.h"

namespace ddprun::launcher::report {
namespace {

namespace fs = std::filesystem;

std::string event(const std::string& name, std::int64_t ms, const std::string& host,
                  const std::string& metadata) {
  return "{\"name\":\"" + name + "\",\"source\":\"AGENT\",\"timestamp\":" + std::to_string(ms) +
         ",\"metadata\":{\"run_id\":\"job\",\"hostname\":\"" + host + "\"" +
         (metadata.empty() ? "" : "," + metadata) + "}}\n";
}

std::string worker(const std::string& state, std::int64_t ms, const std::string& host, int local,
                   int global, int restarts, const std::string& extra = "") {
  return event("torchelastic.worker.status." + state, ms, host,
               "\"local_rank\":" + std::to_string(local) +
                   ",\"global_rank\":" + std::to_string(global) +
                   ",\"agent_restarts\":" + std::to_string(restarts) + extra);
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::path(::testing::TempDir()) / ("report-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "job_a");
    fs::create_directories(dir / "job_b");
    std::ofstream a(dir / "job_a" / "events.jsonl");
    a << worker("START", 1000, "a", 0, 0, 0) << worker("START", 1001, "a", 1, 1, 0)
      << event("ddprun.worker.FIRST_STEP", 3000, "a", "\"local_rank\":0")
      << worker("FAILED", 5000, "a", 1, 1, 0, ",\"exit_code\":3")
      << worker("TERMINATED", 5100, "a", 0, 0, 0) << "not an event\n"
      << event("ddprun.agent.INCIDENT", 5200, "a",
               "\"incident\":1,\"kind\":\"worker failure\",\"cause\":\"worker rank 1 exited\","
               "\"startup\":\"false\",\"complete\":\"true\",\"began\":5000,\"lost_ms\":2500,"
               "\"detect_ms\":0,\"stop_ms\":100,\"restart_ms\":0,\"rendezvous_ms\":100,"
               "\"spawn_ms\":100,\"process_group_ms\":1200,\"first_step_ms\":1000")
      << worker("START", 5300, "a", 0, 0, 1) << worker("START", 5301, "a", 1, 1, 1)
      << worker("SUCCEEDED", 9000, "a", 0, 0, 1) << worker("SUCCEEDED", 9001, "a", 1, 1, 1)
      << event("ddprun.agent.DOWNTIME", 9002, "a",
               "\"incidents\":1,\"lost_ms\":2500,\"training_ms\":5700,\"elapsed_ms\":8002,"
               "\"start_ms\":2000,\"goodput\":\"0.7123\"")
      << event("torchelastic.agent.status.SUCCEEDED", 9003, "a", "\"exit_code\":0");
    std::ofstream b(dir / "job_b" / "events.jsonl");
    b << worker("START", 1002, "b", 0, 2, 0) << worker("TERMINATED", 5150, "b", 0, 2, 0)
      << worker("START", 5302, "b", 0, 2, 1) << worker("SUCCEEDED", 9004, "b", 0, 2, 1)
      << event("torchelastic.agent.status.SUCCEEDED", 9005, "b", "\"exit_code\":0");
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(ReportTest, NodesFilesMergeIntoOneRunWithEachWorkersLives) {
  const RunTimeline run = loadRunTimeline(dir);
  EXPECT_EQ(run.runId, "job");
  EXPECT_EQ(run.sources.size(), 2u);
  EXPECT_EQ(run.unreadLines, 1u);
  EXPECT_EQ(run.firstMs, 1000);
  EXPECT_EQ(run.lastMs, 9005);
  ASSERT_EQ(run.nodes.size(), 2u);
  const NodeTimeline& a = run.nodes[0];
  EXPECT_EQ(a.host, "a");
  ASSERT_EQ(a.workers.size(), 4u);
  EXPECT_EQ(a.workers[0].attempt, 0);
  EXPECT_EQ(a.workers[0].firstStepMs, 3000);
  EXPECT_EQ(a.workers[1].state, "FAILED");
  EXPECT_EQ(a.workers[1].exitCode, 3);
  EXPECT_EQ(a.workers[2].attempt, 1);  // local rank 0's second life
  ASSERT_EQ(a.incidents.size(), 1u);
  EXPECT_EQ(a.incidents[0].phaseMs[5], 1200);  // process_group
  ASSERT_TRUE(a.downtime);
  EXPECT_TRUE(a.downtime->goodput);  // some attempt trained
  EXPECT_EQ(a.exitCode, 0);
  EXPECT_EQ(run.nodes[1].workers.size(), 2u);
}

TEST_F(ReportTest, TheTextNamesEachIncidentItsPhasesAndEachAttempt) {
  const std::string text = formatReportText(loadRunTimeline(dir));
  EXPECT_NE(text.find("Run job: 2 nodes, 6 worker starts, 8.0 s"), std::string::npos) << text;
  EXPECT_NE(text.find("incident 1 at 00:00:05.000: worker failure: worker rank 1 exited (after "
                      "training began)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2.5 s lost: detect 0.0, stop 0.1, restart 0.0, rendezvous 0.1, spawn 0.1, "
                      "process group 1.2, first step 1.0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("goodput 71.2 %"), std::string::npos) << text;
  EXPECT_NE(text.find("attempt 0 (restart count 0): 2 workers from 00:00:01.000, rank 1 failed "
                      "first (exit 3)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("attempt 0 (restart count 0): 1 worker from 00:00:01.002, stopped by ddprun"),
            std::string::npos)
      << text;
}

TEST_F(ReportTest, ThePageHasALanePerNodeAndPerLocalRankAndEscapesText) {
  std::ofstream(dir / "job_b" / "events.jsonl", std::ios::app)
      << event("ddprun.agent.INCIDENT", 5210, "b",
               "\"incident\":1,\"kind\":\"round ended\",\"cause\":\"<script>x</script>\","
               "\"began\":5000,\"lost_ms\":10");
  const std::string html = formatReportHtml(loadRunTimeline(dir));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  std::size_t nodes = 0, ranks = 0;
  for (auto at = html.find("class=\"lane node\""); at != std::string::npos;
       at = html.find("class=\"lane node\"", at + 1)) {
    ++nodes;
  }
  for (auto at = html.find("class=\"lane worker\""); at != std::string::npos;
       at = html.find("class=\"lane worker\"", at + 1)) {
    ++ranks;
  }
  EXPECT_EQ(nodes, 2u);
  EXPECT_EQ(ranks, 3u);                                 // a's local ranks 0 and 1, b's 0
  EXPECT_EQ(html.find("<script>"), std::string::npos);  // no script, and the cause escaped
  EXPECT_NE(html.find("&lt;script&gt;x&lt;/script&gt;"), std::string::npos);
}

TEST(Report, NothingToReadIsOneClearError) {
  const fs::path empty = fs::path(::testing::TempDir()) / "report-test-empty";
  fs::create_directories(empty);
  EXPECT_THROW(loadRunTimeline(empty), ConfigError);
  std::ofstream(empty / "events.jsonl") << "garbage\n";
  try {
    loadRunTimeline(empty / "events.jsonl");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no ddprun events"), std::string::npos) << e.what();
  }
  fs::remove_all(empty);
}

}  // namespace
}  // namespace ddprun::launcher::report
