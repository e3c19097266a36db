// Downtime you can see (docs/operations.md, "Downtime, phase by phase"):
// unmodified PyTorch scripts under ddprun, their incidents timed phase by
// phase in the run directory's events.jsonl, the crash-loop stop (one node
// and two), and `ddprun report` as text and as a page that headless
// Chromium renders (the test keeps a screenshot in
// build/test-artifacts/). Runs under Debian's PyTorch 1.13 and, as
// TorchCurrent.*, the current one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "http_metrics.h"
#include "launcher_support.h"
#include "wait_until.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::freePort;
using harness::launchDir;
using harness::readText;
using harness::runCommand;
using harness::runDdprun;
using harness::scratch;
using harness::testPython;
using harness::writeScript;
namespace fs = std::filesystem;
using nlohmann::json;

const std::map<std::string, std::string> kPython = {{"PYTHON_EXEC", testPython()}};

// Trains 40 steps; rank 1 fails once at step 10 (a marker file remembers).
constexpr char kFailOnceScript[] = R"(
import gc, os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    opt.zero_grad(); model(torch.ones(2, 4)).sum().backward(); opt.step()
    if step == 10 and dist.get_rank() == 1 and not os.path.exists(sys.argv[1]):
        open(sys.argv[1], "w").close()
        os._exit(3)  # at once: rank 0 may abort (134) once it sees the peer gone
# Freed before the interpreter's exit, where PyTorch 2.13's Gloo threads
# sometimes abort the process (as in python_scripts.h's kDdpTrainScript).
del model, opt
gc.collect()
dist.destroy_process_group()
)";

// Every event of `file` (events.jsonl).
std::vector<json> eventsOf(const fs::path& file) {
  std::vector<json> events;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) events.push_back(json::parse(line));
  return events;
}

std::vector<json> named(const std::vector<json>& events, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e["name"] == name) out.push_back(e["metadata"]);
  }
  return out;
}

TEST(Downtime, ACrashLoopStopsWithTheNoRestartCodeAndSaysItWasAtStartup) {
  const fs::path dir = scratch();
  const auto script = writeScript(dir, "crash.py", "import a_module_that_is_not_there\n");
  const auto r =
      runDdprun({"--nproc_per_node=2", "--max_restarts=10", "--restart_backoff_max=0",
                 "--max_no_progress_restarts=2", "--no_restart_exit_code=93", "--rdzv_id=loop",
                 "--log_dir", (dir / "logs").string(), script.string()},
                kPython, 120s);
  EXPECT_EQ(r.code, 93) << r.err;
  EXPECT_NE(r.err.find("ddprun: error: the workers made no progress in 3 attempts in a row "
                       "(--max_no_progress_restarts=2): not restarting; exit code 93 "
                       "(--no_restart_exit_code)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("phase      : at startup (before any rank's first step)"), std::string::npos)
      << r.err;
  const fs::path run = launchDir(dir / "logs", "loop");
  ASSERT_FALSE(run.empty());
  EXPECT_TRUE(fs::exists(run / "attempt_2"));
  EXPECT_FALSE(fs::exists(run / "attempt_3"));  // 7 restarts were left, none spent on a loop
  const auto incidents = named(eventsOf(run / "events.jsonl"), "ddprun.agent.INCIDENT");
  ASSERT_EQ(incidents.size(), 4u);  // the start and three failures
  for (std::size_t i = 1; i < incidents.size(); ++i) {
    EXPECT_EQ(incidents[i]["kind"], "worker failure");
    EXPECT_EQ(incidents[i]["startup"], "true");
    EXPECT_EQ(incidents[i]["complete"], "false");
    EXPECT_FALSE(incidents[i].contains("first_step_ms"));
  }
}

TEST(Downtime, AFailureAfterTrainingIsTimedPhaseByPhaseAndTheReportShowsIt) {
  const fs::path dir = scratch();
  const auto script = writeScript(dir, "train.py", kFailOnceScript);
  const auto r =
      runDdprun({"--nproc_per_node=2", "--max_restarts=2", "--rdzv_id=once", "--log_dir",
                 (dir / "logs").string(), script.string(), (dir / "failed-once").string()},
                kPython, 180s);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("Downtime on this node: 1 incident, "), std::string::npos) << r.err;
  const fs::path run = launchDir(dir / "logs", "once");
  ASSERT_FALSE(run.empty());
  const auto events = eventsOf(run / "events.jsonl");
  const auto incidents = named(events, "ddprun.agent.INCIDENT");
  ASSERT_EQ(incidents.size(), 2u);
  const json& start = incidents[0];
  EXPECT_EQ(start["kind"], "start");
  EXPECT_EQ(start["complete"], "true");
  const json& failure = incidents[1];
  EXPECT_EQ(failure["kind"], "worker failure");
  EXPECT_NE(failure["cause"].get<std::string>().find("worker rank 1"), std::string::npos);
  EXPECT_EQ(failure["startup"], "false");
  EXPECT_EQ(failure["complete"], "true");
  std::int64_t sum = 0;
  for (const char* phase : {"detect_ms", "stop_ms", "restart_ms", "rendezvous_ms", "spawn_ms",
                            "process_group_ms", "first_step_ms"}) {
    ASSERT_TRUE(failure.contains(phase)) << phase << " " << failure.dump();
    EXPECT_GE(failure[phase].get<std::int64_t>(), 0) << phase;
    sum += failure[phase].get<std::int64_t>();
  }
  // The phases add up to the time lost (each is rounded to a millisecond).
  EXPECT_NEAR(static_cast<double>(sum), failure["lost_ms"].get<double>(), 7.0);
  // Each rank of each attempt formed its group and took its first step.
  EXPECT_EQ(named(events, "ddprun.worker.PROCESS_GROUP").size(), 4u);
  EXPECT_EQ(named(events, "ddprun.worker.FIRST_STEP").size(), 4u);
  const auto downtime = named(events, "ddprun.agent.DOWNTIME");
  ASSERT_EQ(downtime.size(), 1u);
  EXPECT_EQ(downtime[0]["incidents"], 1);
  EXPECT_GT(downtime[0]["training_ms"].get<std::int64_t>(), 0);

  // The report, as text and as a page.
  const fs::path page = dir / "report.html";
  const auto report = runCommand(
      {harness::kDdprun, "report", (dir / "logs").string(), "--html", page.string()}, {}, 30s);
  ASSERT_EQ(report.code, 0) << report.err;
  EXPECT_NE(report.out.find("1 incident, "), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("incident 1 at "), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("worker failure: worker rank 1"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("(after training began)"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("attempt 1 (restart count 1): 2 workers"), std::string::npos)
      << report.out;

  // Headless Chromium renders the page; a copy with a script that measures
  // what it laid out says what a reader sees.
  const fs::path artifacts = fs::path(harness::kBinDir).parent_path() / "test-artifacts";
  fs::create_directories(artifacts);
  const fs::path shot =
      artifacts / fmt::format("downtime_report{}.png",
                              testPython() == "/usr/bin/python3" ? "" : "_torch_current");
  fs::remove(shot);
  const std::vector<std::string> chromium = {"/usr/bin/chromium", "--headless",
                                             "--no-sandbox",      "--disable-gpu",
                                             "--hide-scrollbars", "--window-size=1300,700"};
  auto shotArgs = chromium;
  shotArgs.push_back("--screenshot=" + shot.string());
  shotArgs.push_back("file://" + page.string());
  const auto shotRun = runCommand(shotArgs, {}, 60s);
  ASSERT_EQ(shotRun.code, 0) << shotRun.err;
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 10'000u);

  std::string html = readText(page);
  html.insert(html.rfind("</body>"), R"(<script>
const box = e => { const b = e.getBoundingClientRect(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
const all = s => [...document.querySelectorAll(s)];
const out = {
  nodeLanes: all('g.lane.node').length,
  workerLanes: all('g.lane.worker').length,
  svg: box(document.getElementById('timeline')),
  fails: all('.fail-mark').map(box),
  training: all('rect.life.training').map(box),
  phases: all('rect.phase').map(e => Object.assign(box(e), {incident: +e.getAttribute('data-incident'), phase: e.getAttribute('data-phase')})),
  goodput: all('.goodput').map(e => e.textContent),
  incidentRows: all('tr.incident').length,
};
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>
)");
  const fs::path measured = dir / "measured.html";
  std::ofstream(measured) << html;
  auto domArgs = chromium;
  domArgs.push_back("--dump-dom");
  domArgs.push_back("file://" + measured.string());
  const auto dom = runCommand(domArgs, {}, 60s);
  ASSERT_EQ(dom.code, 0) << dom.err;
  const auto from = dom.out.find("<pre id=\"measure\">");
  const auto to = dom.out.find("</pre>", from);
  ASSERT_NE(from, std::string::npos) << dom.out.substr(0, 2000);
  std::string text = dom.out.substr(from + 18, to - from - 18);
  for (const auto& [entity, c] :
       {std::pair{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}) {
    for (auto at = text.find(entity); at != std::string::npos; at = text.find(entity, at + 1)) {
      text.replace(at, std::string(entity).size(), c);
    }
  }
  const json seen = json::parse(text);
  EXPECT_EQ(seen["nodeLanes"], 1);
  EXPECT_EQ(seen["workerLanes"], 2);  // a lane per local rank
  EXPECT_EQ(seen["incidentRows"], 2);
  const json& svg = seen["svg"];
  auto inside = [&svg](const json& b) {
    return b["w"].get<double>() > 0 && b["h"].get<double>() > 0 &&
           b["x"].get<double>() >= svg["x"].get<double>() &&
           b["x"].get<double>() + b["w"].get<double>() <=
               svg["x"].get<double>() + svg["w"].get<double>() + 1;
  };
  ASSERT_EQ(seen["fails"].size(), 1u);  // rank 1's exit in attempt 0
  EXPECT_TRUE(inside(seen["fails"][0])) << seen.dump();
  EXPECT_EQ(seen["training"].size(), 4u);  // each rank trained in each attempt
  for (const auto& b : seen["training"]) EXPECT_TRUE(inside(b)) << b.dump();
  // Incident 1's phases follow each other left to right, after the failure.
  double x = seen["fails"][0]["x"].get<double>() - 6;
  int phases = 0;
  for (const auto& p : seen["phases"]) {
    if (p["incident"] != 1) continue;
    EXPECT_TRUE(inside(p)) << p.dump();
    EXPECT_GE(p["x"].get<double>(), x - 0.5) << p.dump();
    x = p["x"].get<double>();
    ++phases;
  }
  EXPECT_EQ(phases, 7);
  ASSERT_EQ(seen["goodput"].size(), 1u);
  EXPECT_NE(seen["goodput"][0].get<std::string>().find("goodput"), std::string::npos);
}

// A crash loop on one node of two stops both (REPORT_FAILURE's give_up):
// neither waits for the other to come back.
TEST(Downtime, ACrashLoopOnOneNodeStopsEveryNodeWithTheCode) {
  const fs::path dir = scratch();
  const auto script = writeScript(dir, "node_one_fails.py", R"(
import os, torch.distributed as dist
if os.environ["GROUP_RANK"] == "1":
    raise SystemExit(5)
dist.init_process_group("gloo")
)");
  const std::uint16_t port = freePort();
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    nodes.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{harness::kDdprun, "--nproc_per_node=2", "--nnodes=2",
                                 "--node_rank=" + std::to_string(rank), "--master_addr=127.0.0.1",
                                 "--master_port=" + std::to_string(port),
                                 "--local_addr=127.0.0." + std::to_string(rank + 1),
                                 "--max_restarts=10", "--restart_backoff_max=0",
                                 "--max_no_progress_restarts=1", "--no_restart_exit_code=93",
                                 script.string()},
        std::map<std::string, std::string>{{"PYTHON_EXEC", testPython()}, {"DDPRUN_TOKEN", ""}}));
  }
  for (auto& node : nodes) {
    const auto code = node->wait(120s);
    ASSERT_TRUE(code) << "a node did not end: " << node->stderrText();
    EXPECT_EQ(*code, 93) << node->stderrText();
  }
  EXPECT_NE(nodes[1]->stderrText().find("made no progress in 2 attempts in a row"),
            std::string::npos)
      << nodes[1]->stderrText();
}

// PyTorch's flight recorder: every worker gets its variables, with its dumps
// in the attempt's folder. Gloo records collectives from PyTorch 2.8 but
// dumps only when asked: here each rank dumps itself after rank 1 skipped
// an all_reduce and rank 0's timed out (NCCL's watchdog dumps on its own).
// The failure report names the rank that fell behind. Under 1.13 (no
// recorder) the variables are set and the report has no such line.
constexpr char kFallsBehindScript[] = R"(
import datetime, os, signal, sys, torch, torch.distributed as dist
print("env", os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"], os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"],
      os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
def dump():
    c10d = torch._C._distributed_c10d
    if hasattr(c10d, "_dump_fr_trace"):
        with open(os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + str(rank), "wb") as f:
            f.write(c10d._dump_fr_trace())
if rank == 0:
    try:
        dist.all_reduce(t)  # rank 1 never joins it
    except Exception:
        pass
    dump()
    sys.exit(1)
dump()  # rank 1, behind: waits until ddprun stops it once rank 0 failed
signal.pause()
)";

TEST(Downtime, TheFlightRecorderNamesTheRankThatFellBehind) {
  const fs::path dir = scratch();
  const auto script = writeScript(dir, "behind.py", kFallsBehindScript);
  const auto r = runDdprun(
      {"--nproc_per_node=2", "--rdzv_id=fr", "--log_dir", (dir / "logs").string(), script.string()},
      kPython, 120s);
  EXPECT_EQ(r.code, 1) << r.err;
  const fs::path run = launchDir(dir / "logs", "fr");
  ASSERT_FALSE(run.empty());
  const fs::path dumps = run / "attempt_0" / "flight_recorder";
  EXPECT_NE(r.out.find("env 2000 1 " + (dumps / "rank_").string()), std::string::npos) << r.out;
  const bool records = runCommand({testPython(), "-c",
                                   "import sys, torch; sys.exit(0 if hasattr("
                                   "torch._C._distributed_c10d, '_dump_fr_trace') else 1)"},
                                  {}, 60s)
                           .code == 0;
  if (!records) {
    EXPECT_EQ(r.err.find("flight rec.:"), std::string::npos) << r.err;
    return;
  }
  EXPECT_TRUE(fs::exists(dumps / "rank_0"));
  EXPECT_TRUE(fs::exists(dumps / "rank_1"));
  EXPECT_NE(r.err.find("flight rec.: rank 1 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dumps of ranks 0, 1 in " + dumps.string()), std::string::npos) << r.err;
  // PyTorch's analyser ran first; what it printed is kept beside the dumps.
  EXPECT_NE(readText(dumps / "analysis.txt").find("torch.distributed.flight_recorder.fr_trace"),
            std::string::npos);
}

// The frameworks report their process groups and steps through ddprun's
// hook with no change: Lightning and Accelerate (the project's environment;
// Debian's PyTorch 1.13 has neither, so only the TorchCurrent copy runs).
TEST(Downtime, FrameworksReportTheirStepsWithNoChange) {
  if (testPython() == "/usr/bin/python3") {
    GTEST_SKIP() << "Lightning and Accelerate are in the current PyTorch's environment only "
                    "(TorchCurrent.Downtime.FrameworksReportTheirStepsWithNoChange)";
  }
  const fs::path frameworks = fs::path(DDPRUN_SOURCE_DIR) / "tests/integration/frameworks";
  const fs::path dir = scratch();
  for (const auto& [id, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"lightning",
            {(frameworks / "lightning_train.py").string(), (dir / "out").string(), "--devices", "2",
             "--epochs", "1"}},
           {"accelerate", {(frameworks / "accelerate_train.py").string()}}}) {
    SCOPED_TRACE(id);
    std::vector<std::string> argv = {"--nproc_per_node=2", "--rdzv_id=" + id, "--log_dir",
                                     (dir / "logs").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = runDdprun(argv, kPython, 180s);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto events = eventsOf(launchDir(dir / "logs", id) / "events.jsonl");
    EXPECT_EQ(named(events, "ddprun.worker.PROCESS_GROUP").size(), 2u);
    EXPECT_EQ(named(events, "ddprun.worker.FIRST_STEP").size(), 2u);
    EXPECT_NE(r.err.find("Downtime on this node: 0 incidents, 0.0 s lost; goodput "),
              std::string::npos)
        << r.err;
  }
}

// A node alone has no shared store: with --metrics_port its agent serves
// its own downtime. Shell workers report their group and step on the
// progress pipe themselves; local rank 0 fails once.
TEST(Downtime, ANodeAloneServesItsDowntimeMetrics) {
  const fs::path dir = scratch();
  const std::string stop = (dir / "stop").string();
  const std::uint16_t port = freePort();
  const std::string script =
      R"(echo "{\"pid\": $$, \"event\": \"process_group\", \"step\": 0}" > "$DDPRUN_PROGRESS_PIPE"; )"
      R"(echo "{\"pid\": $$, \"event\": \"step\", \"step\": 1}" > "$DDPRUN_PROGRESS_PIPE"; )"
      R"(if [ "$LOCAL_RANK$TORCHELASTIC_RESTART_COUNT" = 00 ]; then exit 3; fi; )"
      "while [ ! -e " +
      stop + " ]; do sleep 0.05; done";
  ChildProcess ddprun({harness::kDdprun, "--nproc_per_node=2", "--max_restarts=1",
                       "--metrics_port=" + std::to_string(port), "/bin/sh", "-c", script},
                      {});
  std::map<std::string, double> m;
  const auto metric = [&m](const std::string& prefix) {
    for (const auto& [key, value] : m) {
      if (key.starts_with(prefix)) return value;
    }
    return -1.0;
  };
  // The incident ended (training again): its first_step phase is counted.
  const bool ended = harness::waitUntil(
      [&] {
        m = harness::parseMetrics(harness::httpGet(port, "/metrics").second);
        for (const auto& [key, value] : m) {
          if (key.starts_with("ddprun_incident_phase_seconds_count{") &&
              key.find("phase=\"first_step\"") != std::string::npos && value == 1) {
            return true;
          }
        }
        return false;
      },
      60s, 100ms);
  std::ofstream(stop).put('1');
  const auto code = ddprun.wait(60s);
  ASSERT_TRUE(ended) << harness::httpGet(port, "/metrics").second << ddprun.stderrText();
  EXPECT_EQ(code, 0) << ddprun.stderrText();
  EXPECT_EQ(metric("ddprun_incidents_total{"), 1);
  EXPECT_GT(metric("ddprun_lost_seconds_total{"), 0);
  EXPECT_GE(metric("ddprun_goodput{"), 0);
  EXPECT_NE(ddprun.stderrText().find(
                fmt::format("This node's metrics are at http://0.0.0.0:{}/metrics.", port)),
            std::string::npos)
      << ddprun.stderrText();
}

TEST(Downtime, ReportRefusesWhatIsNotARunWithOneLine) {
  const fs::path dir = scratch();
  fs::create_directories(dir / "empty");
  const auto r = runCommand({harness::kDdprun, "report", (dir / "empty").string()}, {}, 30s);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ddprun report: error: no events.jsonl under "), std::string::npos) << r.err;
  const auto missing =
      runCommand({harness::kDdprun, "report", (dir / "nothing-here").string()}, {}, 30s);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("is neither a run directory nor an event log"), std::string::npos)
      << missing.err;
}

}  // namespace
}  // namespace ddprun
