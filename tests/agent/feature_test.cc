// The features through their contract only (core/feature.h): fakes for the
// running workers, the lifecycle's inputs, the facts and the sinks; a real
// loop for the pipes they serve.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/agent/features/downtime/downtime_feature.h"
#include "ddprun/agent/features/event_log/event_log_feature.h"
#include "ddprun/agent/features/file_timer/file_timer_feature.h"
#include "ddprun/agent/features/flight_recorder/flight_recorder_setup.h"
#include "ddprun/agent/features/hang_watchdog/hang_watchdog_feature.h"
#include "ddprun/agent/features/node_notes/node_notes.h"
#include "ddprun/agent/features/node_notes/trained_alone_note.h"
#include "ddprun/agent/features/registry.h"
#include "ddprun/agent/features/uninterruptible/uninterruptible_feature.h"
#include "ddprun/common/env.h"
#include "ddprun/common/node_telemetry.h"
#include "ddprun/common/unique_directory.h"
#include "http_metrics.h"
#include "run_until.h"

namespace ddprun::agent {
namespace {

using harness::runUntil;

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class FakeWorkers : public RunningWorkers {
 public:
  std::vector<WatchedWorker> running;
  std::vector<std::pair<int, std::string>> causes;  // local rank, cause
  std::vector<std::pair<int, int>> signals;         // pid, signal

  std::vector<WatchedWorker> watched() const override { return running; }
  std::optional<int> localRankOf(int pid) const override {
    for (const auto& w : running) {
      if (w.pid == pid) return w.localRank;
    }
    return std::nullopt;
  }
  int rankOf(int localRank) const override { return 10 + localRank; }
  void noteCause(int localRank, std::string cause, std::vector<std::string>) override {
    causes.emplace_back(localRank, std::move(cause));
  }
  bool signal(int pid, int signal) override {
    if (!localRankOf(pid)) return false;
    signals.emplace_back(pid, signal);
    return true;
  }
};

class FakeLifecycle : public LifecycleInputs {
 public:
  int progress = 0;
  bool unhealthy = false;
  void noteProgress() override { ++progress; }
  void markUnhealthy() override { unhealthy = true; }
  void fail(const std::string&, int) override {}
};

class Facts : public FactSink {
 public:
  std::vector<FeatureFact> told;
  std::function<void(const FeatureFact&)> deliver;  // to a feature under test
  void tell(const FeatureFact& fact) override {
    told.push_back(fact);
    if (deliver) deliver(fact);
  }
  template <typename T>
  std::vector<T> of() const {
    std::vector<T> found;
    for (const auto& fact : told) {
      if (const auto* f = std::get_if<T>(&fact)) found.push_back(*f);
    }
    return found;
  }
};

class Recorder : public EventRecorder {
 public:
  std::vector<std::string> names;
  void record(const std::string& name, const std::string&,
              std::map<std::string, std::string>) override {
    names.push_back(name);
  }
};

class Learner : public ImportsLearner {
 public:
  int calls = 0;
  void learnProgramImports() override { ++calls; }
};

class Sink : public NodeCountersSink {
 public:
  std::vector<std::string> published;
  void publishCounters(std::string text) override { published.push_back(std::move(text)); }
};

class NoStore : public WorkersStoreView {
 public:
  std::optional<std::uint64_t> workerConnections() const override { return std::nullopt; }
};

class CountedStore : public WorkersStoreView {
 public:
  std::optional<std::uint64_t> connections = 0;
  std::optional<std::uint64_t> workerConnections() const override { return connections; }
};

// What the features log while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

void writeLine(const fs::path& pipe, const std::string& line) {
  const int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0) << pipe;
  const std::string text = line.ends_with('\n') ? line : line + "\n";
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
}

class FeatureTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir); }
  boost::asio::io_context io;
  fs::path dir = makeTemporaryDirectory("ddprun-feature-test-");
  FakeWorkers workers;
  FakeLifecycle lifecycle;
  Facts facts;
  FeaturePorts ports{lifecycle, workers, facts};
};

// A Python job of several workers that succeeded while none of them reached
// the store trained as worlds of one: group rank 0 says so.
TEST_F(FeatureTest, TheTrainedAloneNoteWarnsOnlyWhenNoWorkerReachedTheStore) {
  CountedStore store;
  TrainedAloneNote note({true, 2}, store);
  Attempt attempt;
  attempt.assignment.worldSize = 4;
  attempt.assignment.groupWorldSize = 2;
  GroupOutcome succeeded;
  succeeded.succeeded = true;
  const auto warned = [&](const Attempt& a, const GroupOutcome& outcome) {
    LogCapture log;
    note.attemptEnded(a, outcome);
    return log.text().find("each ran alone, as a world of one") != std::string::npos;
  };
  EXPECT_TRUE(warned(attempt, succeeded));
  EXPECT_FALSE(warned(attempt, GroupOutcome{}));  // a failure says more than this
  store.connections = 3;
  EXPECT_FALSE(warned(attempt, succeeded));
  store.connections = std::nullopt;  // the store is not served here
  EXPECT_FALSE(warned(attempt, succeeded));
  store.connections = 0;
  Attempt other = attempt;
  other.assignment.groupRank = 1;
  EXPECT_FALSE(warned(other, succeeded));
  other = attempt;
  other.assignment.worldSize = 1;
  EXPECT_FALSE(warned(other, succeeded));
}

// A real worker stopped by SIGSTOP: the watchdog blames it, tells the others
// (HangFound) and kills it through the running workers, never a raw pid.
TEST_F(FeatureTest, TheWatchdogTellsTheHangAndKillsThroughTheWorkers) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);  // stopped now
  workers.running = {{0, child}};
  HangWatchdogFeature watchdog(io, 200ms, workers, facts);
  watchdog.attemptStarted(Attempt{});
  EXPECT_TRUE(runUntil(io, [&] { return !workers.signals.empty(); }));
  watchdog.attemptEnded(Attempt{}, GroupOutcome{});
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  ASSERT_EQ(workers.signals.size(), 1u);
  EXPECT_EQ(workers.signals[0], (std::pair<int, int>{child, SIGKILL}));
  ASSERT_EQ(facts.of<HangFound>().size(), 1u);
  ASSERT_EQ(workers.causes.size(), 1u);
  EXPECT_NE(workers.causes[0].second.find("stopped by a signal"), std::string::npos)
      << workers.causes[0].second;
}

// A real worker in uninterruptible sleep (a vfork parent waits in D state):
// past the timeout the node is unhealthy and the worker is killed through
// the running workers.
TEST_F(FeatureTest, AWorkerStuckInDStateMakesTheNodeUnhealthy) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setpgid(0, 0);
    if (::vfork() == 0) {
      for (;;) ::pause();  // the vfork child: only system calls until killed
    }
    ::_exit(0);
  }
  ::setpgid(child, child);
  workers.running = {{0, child}};
  UninterruptibleFeature watch(io, 300ms, workers, lifecycle);
  watch.attemptStarted(Attempt{});
  EXPECT_TRUE(runUntil(io, [&] { return !workers.signals.empty(); }));
  watch.attemptEnded(Attempt{}, GroupOutcome{});
  ::kill(-child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(lifecycle.unhealthy);
  ASSERT_EQ(workers.signals.size(), 1u);
  EXPECT_EQ(workers.signals[0], (std::pair<int, int>{child, SIGKILL}));
  ASSERT_EQ(workers.causes.size(), 1u);
  EXPECT_NE(workers.causes[0].second.find("stuck in uninterruptible sleep (D state)"),
            std::string::npos)
      << workers.causes[0].second;
}

// Each worker's start and end as torchelastic's event, with the job's names
// from the feature's slice, into the run directory's events.jsonl.
TEST_F(FeatureTest, TheEventLogRecordsWorkersWithItsSlice) {
  {
    EventLogFeature log({EventLogConfig{}, "job-7", "host-a", "trainer", "etcd", 3}, dir);
    log.workerEvent(WorkerEvent{"FAILED", 5, 1, 1, 4242, 9, "boom", 2});
    log.record("ddprun.custom", "AGENT", {{"k", "v"}});
  }
  std::ifstream in(dir / "events.jsonl");
  std::string first, second;
  ASSERT_TRUE(std::getline(in, first));
  ASSERT_TRUE(std::getline(in, second));
  for (const std::string piece :
       {"torchelastic.worker.status.FAILED", "job-7", "host-a", "trainer", "\"etcd\"", "boom"}) {
    EXPECT_NE(first.find(piece), std::string::npos) << piece << " in " << first;
  }
  EXPECT_NE(second.find("ddprun.custom"), std::string::npos) << second;
  EXPECT_NE(second.find("job-7"), std::string::npos) << second;
}

// A node alone serves its own downtime at /metrics, read from the counters'
// source at each request.
TEST_F(FeatureTest, ANodeAloneServesItsCountersAtMetrics) {
  struct Counters : NodeCountersSource {
    mutable std::mutex mutex;  // read on the loop's thread
    std::string text = "incidents=2 lost_ms=1500";
    std::string countersText() const override {
      std::lock_guard lock(mutex);
      return text;
    }
  } counters;
  NodeMetricsFeature metrics(io, 0, "job", "host-a", counters);
  auto work = boost::asio::make_work_guard(io);
  std::thread loop([this] { io.run(); });
  const auto [status, body] = harness::httpGet(metrics.port(), "/metrics");
  {
    std::lock_guard lock(counters.mutex);
    counters.text = "incidents=3 lost_ms=2500";
  }
  const auto later = harness::httpGet(metrics.port(), "/metrics").second;
  work.reset();
  io.stop();
  loop.join();
  EXPECT_NE(status.find("200"), std::string::npos) << status;
  EXPECT_NE(body.find("host-a"), std::string::npos) << body;
  EXPECT_NE(later.find(" 3"), std::string::npos) << later;
}

TEST_F(FeatureTest, TheRelayLossIsNotedAsEveryRunningWorkersCause) {
  workers.running = {{0, 100}, {1, 101}};
  RelayLossNote note(workers);
  note.heard(CountersChanged{"incidents=0"});
  EXPECT_TRUE(workers.causes.empty());
  note.heard(RelayLost{"the relay lost the store"});
  ASSERT_EQ(workers.causes.size(), 2u);
  EXPECT_EQ(workers.causes[0], (std::pair<int, std::string>{0, "the relay lost the store"}));
  EXPECT_EQ(workers.causes[1].first, 1);
}

TEST_F(FeatureTest, TheJobsStoreGetsEachChangeOfTheCounters) {
  Sink sink;
  TheJobStoresCounters counters(sink);
  counters.heard(HangFound{2.0});
  counters.heard(CountersChanged{"incidents=1 lost_ms=5"});
  EXPECT_EQ(sink.published, std::vector<std::string>{"incidents=1 lost_ms=5"});
}

TEST_F(FeatureTest, JobNoticesAreSaidOnceByTheFirstRoundsGroupRankZero) {
  rendezvous::protocol::Assignment first;
  first.groupRank = 0;
  {
    JobNotices notices(true, "the store is open", "");
    ::testing::internal::CaptureStderr();
    notices.roundAssigned(first);
    notices.roundAssigned(first);
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(said, "ddprun: notice: the store is open\n");
  }
  {
    JobNotices notices(true, "the store is open", "");
    rendezvous::protocol::Assignment other;
    other.groupRank = 1;
    ::testing::internal::CaptureStderr();
    notices.roundAssigned(other);
    notices.roundAssigned(first);  // group rank 0 only later: another node said it
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

TEST_F(FeatureTest, FileTimersAreOffUnlessTheEnvironmentAsks) {
  EXPECT_EQ(FileTimerFeature::fromEnvironment(io, {}, dir, workers, facts), nullptr);
  EXPECT_EQ(FileTimerFeature::fromEnvironment(io, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}, dir,
                                              workers, facts),
            nullptr);
}

// A request is told as a step (TimerRequested); an expired timer's signal
// goes through the running workers, never to a raw pid.
TEST_F(FeatureTest, AFileTimerNamesItsPipeTellsRequestsAndSignalsThroughTheWorkers) {
  workers.running = {{0, 4242}};
  auto timer = FileTimerFeature::fromEnvironment(io, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}, dir,
                                                 workers, facts);
  ASSERT_NE(timer, nullptr);
  Environment env;
  timer->contributeEnvironment(env);
  const fs::path pipe = env.at("TORCHELASTIC_TIMER_FILE");
  EXPECT_EQ(pipe, dir / "file_timer.pipe");
  writeLine(
      pipe,
      R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1.0, "signal": 9})");
  ASSERT_TRUE(runUntil(io, [&] { return !workers.signals.empty(); }));
  EXPECT_EQ(workers.signals[0], (std::pair<int, int>{4242, SIGKILL}));
  ASSERT_EQ(facts.of<TimerRequested>().size(), 1u);
  EXPECT_EQ(facts.of<TimerRequested>()[0].pid, 4242);
  ASSERT_EQ(workers.causes.size(), 1u);
  EXPECT_NE(workers.causes[0].second.find("file timer 'step' (pid 4242) expired"),
            std::string::npos);
}

TEST_F(FeatureTest, DowntimeNamesItsPipeAndPutsItsHookFirstOnThePythonPath) {
  Recorder events;
  Learner learner;
  DowntimeFeature downtime(io, dir, true, 2, ports, events, learner);
  Environment env{{"PYTHONPATH", "/mine"}};
  downtime.contributeEnvironment(env);
  EXPECT_EQ(env.at(env::kProgressPipe), (dir / "progress.pipe").string());
  EXPECT_EQ(env.at("PYTHONPATH"), (dir / "progress_hook").string() + ":/mine");
  EXPECT_TRUE(fs::exists(dir / "progress_hook" / "sitecustomize.py"));
  Environment bare;
  fs::create_directories(dir / "other");
  DowntimeFeature noHook(io, dir / "other", false, 1, ports, events, learner);
  noHook.contributeEnvironment(bare);
  EXPECT_FALSE(bare.contains("PYTHONPATH"));
}

// The facts other features tell (a file timer's request, a hang) and the
// workers' reports on the pipe: the attempt's first step is progress for the
// lifecycle, counters go out as a fact, an imports report to the zygote.
TEST_F(FeatureTest, DowntimeHearsStepsFromFactsAndThePipe) {
  Recorder events;
  Learner learner;
  DowntimeFeature downtime(io, dir, false, 2, ports, events, learner);
  workers.running = {{0, 500}, {1, 501}};
  downtime.joining();
  EXPECT_EQ(facts.of<CountersChanged>().size(), 1u);  // the first publication
  Attempt attempt;
  downtime.attemptStarted(attempt);
  for (int i : {0, 1}) {
    downtime.workerEvent(WorkerEvent{"START", 10 + i, 0, i, 500 + i, std::nullopt, "", 0});
  }
  downtime.heard(TimerRequested{500});
  EXPECT_EQ(lifecycle.progress, 1);     // the attempt's first step
  downtime.heard(TimerRequested{999});  // not a worker
  EXPECT_EQ(lifecycle.progress, 1);
  const fs::path pipe = dir / "progress.pipe";
  writeLine(pipe, telemetry::progressLine(501, telemetry::ProgressEvent::kImports, 0));
  ASSERT_TRUE(runUntil(io, [&] { return learner.calls == 1; }));
  writeLine(pipe, telemetry::progressLine(501, telemetry::ProgressEvent::kStep, 1));
  ASSERT_TRUE(runUntil(io, [&] {
    return std::count(events.names.begin(), events.names.end(), telemetry::kFirstStepEvent) == 2;
  }));
  EXPECT_EQ(lifecycle.progress, 1);  // only the attempt's first step is progress
  downtime.exiting(NodeExit{});
  EXPECT_NE(std::find(events.names.begin(), events.names.end(), telemetry::kDowntimeEvent),
            events.names.end());
}

TEST_F(FeatureTest, TheFlightRecorderDumpsIntoTheAttemptUnlessTheUserSetItUp) {
  FlightRecorderSetup setup([this](const Attempt& a) {
    return dir / ("attempt_" + std::to_string(a.runIndex)) / "flight_recorder";
  });
  Attempt attempt;
  attempt.runIndex = 1;
  Environment env;
  setup.contributeAttemptEnvironment(attempt, env);
  const fs::path folder = dir / "attempt_1" / "flight_recorder";
  EXPECT_TRUE(fs::is_directory(folder));
  EXPECT_EQ(env["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000");
  EXPECT_EQ(env["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], (folder / "rank_").string());
  // The user's settings, under either name, stand; nothing is added beside them.
  env = {{"TORCH_FR_BUFFER_SIZE", "100"},
         {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"},
         {"TORCH_FR_DUMP_TEMP_FILE", "/mine/fr_"}};
  setup.contributeAttemptEnvironment(attempt, env);
  EXPECT_FALSE(env.contains("TORCH_NCCL_TRACE_BUFFER_SIZE"));
  EXPECT_EQ(env["TORCH_FR_BUFFER_SIZE"], "100");
  EXPECT_EQ(env["TORCH_NCCL_DUMP_ON_TIMEOUT"], "0");
  EXPECT_FALSE(env.contains("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  // No folder for the dumps (a file in its way): nothing set.
  FlightRecorderSetup blocked([this](const Attempt&) { return dir / "file" / "flight_recorder"; });
  std::ofstream(dir / "file") << "x";
  Environment none;
  blocked.contributeAttemptEnvironment(attempt, none);
  EXPECT_TRUE(none.empty());
}

// The list: a node alone gets the notes, the failure report, downtime and
// the event log; a fact reaches every feature; contributions are in order.
TEST_F(FeatureTest, TheSetBuildsTheListAndCarriesFactsAndContributions) {
  AgentConfig config;
  config.runId = "job";
  NoStore store;
  const Environment inherited{{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}};
  FeatureSet set(FeatureContext{io, config, inherited, dir, false, workers, store, nullptr, "",
                                [] {}, [this](const Attempt&) { return dir / "fr"; }});
  Environment env = inherited;
  set.contributeEnvironment(env);
  EXPECT_TRUE(env.contains(env::kProgressPipe));
  EXPECT_EQ(env.at("TORCHELASTIC_TIMER_FILE"), (dir / "file_timer.pipe").string());
  workers.running = {{0, 700}};
  set.tell(RelayLost{"gone"});
  ASSERT_EQ(workers.causes.size(), 1u);
  EXPECT_EQ(workers.causes[0].second, "gone");
  // No lifecycle attached yet: the inputs go nowhere, and nothing breaks.
  set.noteProgress();
  set.learnProgramImports();
}

}  // namespace
}  // namespace ddprun::agent
