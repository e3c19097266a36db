// ddprun on one node, driven as a user drives it: the real binary, real
// processes, real signals.
#include <signal.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "launcher_support.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::goneWithin;
using harness::kBinDir;
using harness::kDdprun;
using harness::linesWith;
using harness::processGone;
using harness::runDdprun;
namespace fs = std::filesystem;

using harness::args;
using harness::scratch;
using harness::sh;
using harness::startAndWait;

// TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (torchrun 2.13+): a worker in D
// state that long makes the node unhealthy: no restart, and the job fails
// (torchrun 2.14 exits 0 here).
TEST(Launcher, AWorkerStuckInDStateEndsTheJobWithoutARestart) {
  const auto r = runDdprun({"--nproc_per_node=2", "--max_restarts=3",
                            "--log_prefix=", std::string(kBinDir) + "/d_state_worker"},
                           {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "1"}}, 60s);
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("Worker rank 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("entered uninterruptible sleep (D state)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stuck in uninterruptible sleep (D state) for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no restart"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Restarting"), std::string::npos) << r.err;
  EXPECT_EQ(linesWith(r.out, "rank 0 up").size(), 1u) << r.out;  // one attempt only
}

TEST(Launcher, ABadUninterruptibleStateTimeoutIsRefused) {
  const auto r = runDdprun({"/bin/true"}, {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "soon"}});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=soon is not a number"),
            std::string::npos)
      << r.err;
}

TEST(Launcher, EveryRankGetsTorchrunsEnvironment) {
  const auto r = runDdprun(
      args({"--nproc_per_node=3", "--rdzv_id=envjob", "--role=trainer", "--max_restarts=2",
            "--log_prefix="},
           sh("echo ENV $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $ROLE_RANK "
              "$ROLE_NAME $GROUP_WORLD_SIZE $ROLE_WORLD_SIZE $MASTER_ADDR "
              "$TORCHELASTIC_RESTART_COUNT "
              "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID $TORCHELASTIC_USE_AGENT_STORE "
              "$OMP_NUM_THREADS $TORCH_NCCL_ASYNC_ERROR_HANDLING $DDPRUN_STORE_HOST "
              "$DDPRUN_STORE_PREFIX; echo PORTS $MASTER_PORT $DDPRUN_STORE_PORT ${#DDPRUN_TOKEN}; "
              "echo CRED ${DDPRUN_TOKEN%:*}; "
              "echo ERRFILE $TORCHELASTIC_ERROR_FILE")),
      {{"OMP_NUM_THREADS", ""}});
  ASSERT_EQ(r.code, 0) << r.err;
  auto env = linesWith(r.out, "ENV ");
  ASSERT_EQ(env.size(), 3u) << r.out;
  std::sort(env.begin(), env.end());
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(env[rank], fmt::format("{0} {0} 3 3 0 {0} trainer 1 3 127.0.0.1 0 2 envjob True 1 "
                                     "1 127.0.0.1 envjob/attempt_0/",
                                     rank));
  }
  for (const auto& ports : linesWith(r.out, "PORTS ")) {
    std::istringstream in(ports);
    int master = 0, store = 0, tokenLength = 0;
    in >> master >> store >> tokenLength;
    EXPECT_GT(master, 0);
    EXPECT_EQ(master, store);  // workers' TCPStore clients use the agent's store
    EXPECT_EQ(tokenLength, std::string("worker:envjob:").size() + 64);  // HMAC-SHA256 in hex
  }
  // Workers hold a credential for their job's keys, never the agent's token.
  for (const auto& credential : linesWith(r.out, "CRED ")) EXPECT_EQ(credential, "worker:envjob");
  std::set<std::string> errorFiles;
  for (const auto& file : linesWith(r.out, "ERRFILE ")) errorFiles.insert(file);
  EXPECT_EQ(errorFiles.size(), 3u);
  for (const auto& file : errorFiles) {
    EXPECT_TRUE(std::regex_search(file, std::regex("/envjob_[^/]{6}/attempt_0/[012]/error.json$")))
        << file;
  }
  EXPECT_NE(r.err.find("Setting OMP_NUM_THREADS"), std::string::npos);
}

TEST(Launcher, UserSettingsWinOverDefaults) {
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--master_port=29999", "--log_prefix="},
                     sh("echo V $OMP_NUM_THREADS $TORCH_NCCL_ASYNC_ERROR_HANDLING $MASTER_PORT")),
                {{"OMP_NUM_THREADS", "4"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "V "), (std::vector<std::string>{"4 0 29999", "4 0 29999"}));
  EXPECT_EQ(r.err.find("Setting OMP_NUM_THREADS"), std::string::npos);
}

TEST(Launcher, Rank0WorkerStoreIsTorchrun113sBehaviour) {
  const auto r = runDdprun(args({"--worker_store=rank0", "--log_prefix="},
                                sh("echo S $TORCHELASTIC_USE_AGENT_STORE $MASTER_PORT "
                                   "$DDPRUN_STORE_PORT")));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = linesWith(r.out, "S ");
  ASSERT_EQ(lines.size(), 1u);
  std::istringstream in(lines[0]);
  std::string flag;
  int master = 0, store = 0;
  in >> flag >> master >> store;
  EXPECT_EQ(flag, "False");
  EXPECT_NE(master, store);
}

// A job of one worker: the worker hosts its own store, as under `python`
// (a torch.multiprocessing.spawn script's own ranks then find it); asked
// for, the agent's store all the same.
TEST(Launcher, AJobOfOneWorkerHostsItsOwnStore) {
  const auto show = sh("echo S $TORCHELASTIC_USE_AGENT_STORE $MASTER_PORT $DDPRUN_STORE_PORT");
  for (const auto& [options, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--log_prefix="}, "False"},
           {{"--log_prefix=", "--worker_store=agent"}, "True"},
           {{"--log_prefix=", "--nproc_per_node=2"}, "True"}}) {
    const auto r = runDdprun(args(options, show));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto lines = linesWith(r.out, "S ");
    ASSERT_FALSE(lines.empty()) << r.out;
    std::istringstream in(lines[0]);
    std::string flag;
    int master = 0, store = 0;
    in >> flag >> master >> store;
    EXPECT_EQ(flag, expected) << options.back();
    EXPECT_EQ(master == store, expected == "True") << options.back();
  }
}

TEST(Launcher, PetEnvironmentVariablesAreOptions) {
  const auto r = runDdprun(sh("echo $RANK"), {{"PET_NPROC_PER_NODE", "3"}, {"PET_LOG_PREFIX", ""}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "").size(), 3u) << r.out;
  // The flag wins over PET_*.
  const auto flag = runDdprun(args({"--nproc-per-node=2", "--log-prefix="}, sh("echo $RANK")),
                              {{"PET_NPROC_PER_NODE", "3"}});
  EXPECT_EQ(linesWith(flag.out, "").size(), 2u) << flag.out;
}

TEST(Launcher, WorkersUseTheStoreThroughTheNativeClient) {
  const auto r = runDdprun({"--nproc_per_node=4", kBinDir + "/hello"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(
        r.out.find(fmt::format("[rank {}]: rank {} sees rank {}", rank, rank, (rank + 1) % 4)),
        std::string::npos)
        << r.out;
  }
}

// Shell snippet: rank 1 waits (bounded) until rank 0 has created `flag`.
std::string afterRankZero(const fs::path& flag) {
  return "if [ $LOCAL_RANK = 0 ]; then touch " + flag.string() +
         "_$TORCHELASTIC_RESTART_COUNT; else i=0; while [ ! -e " + flag.string() +
         "_$TORCHELASTIC_RESTART_COUNT ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; "
         "fi; ";
}

TEST(Launcher, RestartsCountDownTheBudget) {
  const fs::path flag = scratch() / "printed";
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--max_restarts=2"},
                     sh("echo attempt $TORCHELASTIC_RESTART_COUNT; " + afterRankZero(flag) +
                        "[ $LOCAL_RANK = 1 ] && exit 3; sleep 30")));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(linesWith(r.out, "[rank 0]: attempt "), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_NE(r.err.find("Restarting the worker group (restart 1 of 2)"), std::string::npos);
  EXPECT_NE(r.err.find("Restarting the worker group (restart 2 of 2)"), std::string::npos);
  EXPECT_NE(r.err.find("FAILED after 3 attempts"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attempt 0: worker rank 1"), std::string::npos) << r.err;
}

// The first restart is immediate; failures in a row then back off,
// doubling with jitter (waits 0, 0.2-0.4 s, 0.4-0.8 s here), and the report
// lists the earlier attempts.
TEST(Launcher, RestartsInARowBackOff) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = runDdprun(
      args({"--max_restarts=3", "--restart_backoff_initial=0.4", "--restart_backoff_max=5"},
           sh("exit 3")));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_GE(elapsed, std::chrono::milliseconds(600)) << r.err;
  EXPECT_EQ(r.err.find("failed 1 times in a row"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("The workers failed 2 times in a row; restarting in 0."), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("The workers failed 3 times in a row; restarting in"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Earlier attempts (3 failed):"), std::string::npos) << r.err;

  const auto immediate =
      runDdprun(args({"--max_restarts=3", "--restart_backoff_max=0"}, sh("exit 3")));
  EXPECT_EQ(immediate.code, 3);
  EXPECT_EQ(immediate.err.find("restarting in"), std::string::npos) << immediate.err;
  EXPECT_NE(immediate.err.find("Restarting the worker group (restart 3 of 3)"), std::string::npos);
}

// ddprun::worker's file timer (expires()) in a C++ worker: the agent kills
// the worker whose timer expired, and the restarted job finishes.
TEST(Launcher, TheCppFileTimerKillsAHungWorker) {
  const auto r = runDdprun({"--nproc_per_node=2", "--max_restarts=1",
                            "--log_prefix=", harness::kBinDir + "/timed_worker", "--hang"},
                           {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "attempt "), (std::vector<std::string>{"1 done", "1 done"})) << r.out;
  EXPECT_NE(r.err.find("Worker rank 1: file timer 'cpp_stuck_step'"), std::string::npos) << r.err;

  // Without the timer server, expires() says how to get one.
  const auto without = runDdprun({harness::kBinDir + "/timed_worker"});
  EXPECT_EQ(without.code, 1);
  EXPECT_NE(without.err.find("TORCHELASTIC_ENABLE_FILE_TIMER=1"), std::string::npos) << without.err;
}

// --watchdog_timeout: a node whose workers all stop making progress is
// hung (the report names the cause); a node where one worker still
// computes while the other waits quietly is not.
TEST(Launcher, TheWatchdogFailsANodeWhoseWorkersAllStopped) {
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--watchdog_timeout=1"}, sh("sleep 30")), {}, 20s);
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("cause      : hung: no worker of this node made progress"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("    state S (sleeping)"), std::string::npos) << r.err;
}

// A worker stopped by a signal (state T) is the one blamed, though a peer
// that waits quietly stopped making progress before it did.
TEST(Launcher, TheWatchdogBlamesAStoppedWorkerOverOneThatWaits) {
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--watchdog_timeout=1"},
                     sh("if [ $RANK = 1 ]; then sleep 0.5; kill -STOP $$; fi; sleep 30")),
                {}, 20s);
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("Worker rank 1 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this one is stopped by a signal (state T"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  rank       : 1 "), std::string::npos) << r.err;
}

// While ddprun stops its workers (--shutdown_timeout), the watchdog is off:
// a worker that ignores SIGTERM and sits quiet is killed by the shutdown's
// SIGKILL, not reported as hung.
TEST(Launcher, TheWatchdogLeavesWorkersBeingStoppedAlone) {
  ChildProcess ddprun(
      args({kDdprun, "--nproc_per_node=1", "--watchdog_timeout=1", "--shutdown_timeout=4"},
           sh("trap '' TERM; echo started; sleep 30")));
  std::optional<std::string> line;
  while ((line = ddprun.readStdoutLine(20s)) && line->find("started") == std::string::npos) {
  }
  ASSERT_TRUE(line.has_value());
  ddprun.signal(SIGTERM);
  EXPECT_EQ(ddprun.wait(30s), 128 + SIGTERM);
  const std::string err = ddprun.stderrText();
  EXPECT_EQ(err.find("hung"), std::string::npos) << err;
}

TEST(Launcher, TheWatchdogLeavesAQuietButHealthyJobAlone) {
  // Rank 0 computes for 2-3 s while rank 1 waits without CPU or I/O until
  // rank 0 is done (a FIFO: its open blocks in the kernel), as at a barrier
  // during rank 0's evaluation. However late either starts, rank 1 never
  // waits alone.
  const auto fifo = harness::scratch() / "barrier";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--watchdog_timeout=1.5"},
                     sh(fmt::format("if [ $RANK = 0 ]; then end=$(($(date +%s) + 3)); "
                                    "while [ $(date +%s) -lt $end ]; do :; done; echo done > {0}; "
                                    "else read x < {0}; fi; echo finished",
                                    fifo.string()))),
                {}, 60s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("hung"), std::string::npos) << r.err;
}

TEST(Launcher, AFailureFollowedByASuccessfulRestartSucceeds) {
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--max_restarts=3"},
                     sh("[ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ] && exit 5; "
                        "echo done $TORCHELASTIC_RESTART_COUNT")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "[rank 1]: done "), (std::vector<std::string>{"1"}));
  EXPECT_EQ(r.err.find("FAILED"), std::string::npos);
}

TEST(Launcher, ExitCodeIsTheRootCausesCode) {
  EXPECT_EQ(runDdprun(sh("exit 42")).code, 42);
  EXPECT_EQ(runDdprun(sh("exit 0")).code, 0);
  const auto r = runDdprun(sh("kill -SEGV $$"));
  EXPECT_EQ(r.code, 128 + SIGSEGV);
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

TEST(Launcher, RootCauseIsTheFirstFailureInTime) {
  const auto r = runDdprun(
      args({"--nproc_per_node=3"}, sh("if [ $RANK = 2 ]; then echo early failure >&2; exit 9; fi; "
                                      "sleep 10; exit 4")));
  EXPECT_EQ(r.code, 9) << r.err;
  EXPECT_NE(r.err.find("rank       : 2 (local_rank 2, node 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exit       : 9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    early failure"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Stopped by ddprun after the failure: ranks 0, 1"), std::string::npos)
      << r.err;
}

TEST(Launcher, RootCauseReportUsesTheErrorFile) {
  const std::string json =
      R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: boom", )"
      R"("timestamp": "1700000000"}}})";
  const auto r = runDdprun(args({"--nproc_per_node=2"},
                                sh("[ $RANK = 1 ] || exec sleep 30; echo noise >&2; printf '%s' '" +
                                   json + "' > $TORCHELASTIC_ERROR_FILE; exit 1")));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("message    : ValueError: boom"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    File \"train.py\", line 3"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("error_file : .*/attempt_0/1/error.json")))
      << r.err;
  EXPECT_NE(r.err.find("pid        : "), std::string::npos);
  EXPECT_NE(r.err.find("host       : "), std::string::npos);
}

TEST(Launcher, RootCauseReportWithoutAnErrorFileShowsStderr) {
  const auto r = runDdprun(sh("echo line one >&2; echo line two >&2; exit 3"));
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("error_file : <none written>"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("last lines of stderr:\n    line one\n    line two"), std::string::npos)
      << r.err;
}

TEST(Launcher, ProgramThatCannotStartIsReported) {
  const fs::path dir = scratch();
  const fs::path script = dir / "vanishing";
  std::ofstream(script) << "#!/nonexistent/interpreter\n";
  fs::permissions(script, fs::perms::owner_all);
  const auto r = runDdprun({script.string()});
  EXPECT_EQ(r.code, 127) << r.err;
  EXPECT_NE(r.err.find("cannot start"), std::string::npos) << r.err;
}

TEST(Launcher, SignalsAreForwardedToEveryWorker) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    SCOPED_TRACE(sig);
    const fs::path pids = scratch() / fmt::format("pids-{}", sig);
    std::vector<pid_t> workers;
    auto process = startAndWait(
        args({"--nproc_per_node=2", "--log_prefix="},
             sh("trap 'echo got signal $RANK; exit 0' HUP INT QUIT TERM USR1 USR2; echo $$ >> " +
                pids.string() + "; while :; do sleep 0.05; done")),
        pids, 2, workers);
    ASSERT_EQ(workers.size(), 2u);
    process->signal(sig);
    EXPECT_EQ(process->wait(10s), 128 + sig);
    const std::string out = process->stdoutText();
    EXPECT_NE(out.find("got signal 0"), std::string::npos) << out;
    EXPECT_NE(out.find("got signal 1"), std::string::npos) << out;
    for (pid_t pid : workers) EXPECT_TRUE(processGone(pid));
  }
}

TEST(Launcher, WorkersIgnoringTheSignalAreKilledAfterTheGracePeriod) {
  const fs::path dir = scratch();
  const fs::path pids = dir / "pids";
  std::vector<pid_t> workers;
  auto process = startAndWait(
      args({"--nproc_per_node=2", "--shutdown_timeout=0.3"},
           sh("trap '' TERM; echo $$ >> " + pids.string() + "; while :; do sleep 0.05; done")),
      pids, 2, workers);
  ASSERT_EQ(workers.size(), 2u);
  const auto start = std::chrono::steady_clock::now();
  process->signal(SIGTERM);
  EXPECT_EQ(process->wait(10s), 128 + SIGTERM);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
  for (pid_t pid : workers) EXPECT_TRUE(processGone(pid));
  EXPECT_NE(process->stderrText().find("sending SIGKILL"), std::string::npos);
}

// A worker's failure stops the survivors with SIGTERM and, after the
// survivors' grace (--survivor_grace, 50 ms), SIGKILL: their world is
// broken. --shutdown_timeout (300 s here) is for a signal from the user or
// the scheduler. Rank 0 ignores SIGTERM; rank 1 fails once rank 0 does.
TEST(Launcher, TheSurvivorsOfAWorkersFailureHaveTheSurvivorsGrace) {
  const fs::path ready = scratch() / "ready";
  const auto r = runDdprun(args({"--nproc_per_node=2", "--shutdown_timeout=300", "--log_prefix="},
                                sh("if [ $LOCAL_RANK = 1 ]; then while [ ! -e " + ready.string() +
                                   " ]; do sleep 0.05; done; exit 7; fi; trap '' TERM; touch " +
                                   ready.string() + "; while :; do sleep 0.05; done")),
                           {}, 120s);
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_NE(r.err.find("Worker rank 0 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outlived the survivors' grace of 50 ms; sending SIGKILL"),
            std::string::npos)
      << r.err;
}

// docs/cli.md: a second signal skips the grace period. The workers trap
// SIGTERM and go on; the second SIGTERM (later than the same delivery's
// window) kills them at once instead of after --shutdown_timeout.
TEST(Launcher, ASecondSignalKillsTheWorkersAtOnce) {
  const fs::path pids = scratch() / "pids";
  const fs::path trapped = scratch() / "trapped";
  std::vector<pid_t> workers;
  auto process =
      startAndWait(args({"--nproc_per_node=2", "--shutdown_timeout=300"},
                        sh("trap 'echo trapped >> " + trapped.string() + "' TERM; echo $$ >> " +
                           pids.string() + "; while :; do sleep 0.05; done")),
                   pids, 2, workers);
  ASSERT_EQ(workers.size(), 2u);
  process->signal(SIGTERM);
  // Both workers ran their trap: the first signal reached them.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (linesWith(harness::readText(trapped), "trapped").size() < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(linesWith(harness::readText(trapped), "trapped").size(), 2u);
  // The window in which a repeat counts as the same delivery is 0.5 s.
  std::this_thread::sleep_for(600ms);
  process->signal(SIGTERM);
  EXPECT_EQ(process->wait(60s), 128 + SIGTERM);
  for (pid_t pid : workers) EXPECT_TRUE(processGone(pid));
  const std::string err = process->stderrText();
  EXPECT_NE(err.find("received SIGTERM again; killing the workers now"), std::string::npos) << err;
}

// coreutils' timeout sends SIGTERM to ddprun and then to its process group
// within a millisecond: one stop, so the workers keep their grace period
// and finish what they were doing.
TEST(Launcher, CoreutilsTimeoutKeepsTheWorkersGracePeriod) {
  const fs::path pids = scratch() / "pids";
  std::vector<std::string> argv = {
      "/usr/bin/timeout",      "-s",           "TERM", "2", kDdprun, "--nproc_per_node=2",
      "--shutdown_timeout=60", "--log_prefix="};
  const auto worker = sh("trap 'sleep 1; echo saved $RANK; exit 0' TERM; echo $$ >> " +
                         pids.string() + "; while :; do sleep 0.05; done");
  argv.insert(argv.end(), worker.begin(), worker.end());
  const auto r = harness::runCommand(argv, {}, 60s);
  EXPECT_EQ(r.code, 124) << r.err;  // timeout's code after its signal
  EXPECT_EQ(linesWith(r.out, "saved ").size(), 2u) << r.out << r.err;
  EXPECT_EQ(r.err.find("killing the workers now"), std::string::npos) << r.err;
}

// Each worker leads a session of its own, as under torchrun
// (start_new_session): the kernel's autogroup scheduler then gives each
// worker its own CPU share.
TEST(Launcher, EachWorkerHasASessionOfItsOwn) {
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--log_prefix="},
                     sh("echo session $(ps -o sid= -p $$) pid $$ agent $(ps -o sid= -p $PPID)")));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = linesWith(r.out, "session ");
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& line : lines) {
    std::istringstream in(line);
    std::string sid, pidWord, pid, agentWord, agentSid;
    in >> sid >> pidWord >> pid >> agentWord >> agentSid;
    EXPECT_EQ(sid, pid) << line;
    EXPECT_NE(sid, agentSid) << line;
  }
}

TEST(Launcher, SigkillOfDdprunLeavesNoWorkerAndNoGrandchild) {
  const fs::path dir = scratch();
  const fs::path pids = dir / "pids";
  std::vector<pid_t> all;
  // Each worker starts a grandchild (in its process group) and a
  // great-grandchild, then sleeps: 2 workers + 4 descendants.
  auto process =
      startAndWait(args({"--nproc_per_node=2"},
                        sh("echo $$ >> " + pids.string() + "; sh -c 'echo $$ >> " + pids.string() +
                           "; sleep 1000 & echo $! >> " + pids.string() + "; wait' & sleep 1000")),
                   pids, 6, all);
  ASSERT_EQ(all.size(), 6u);
  for (pid_t pid : all) ASSERT_FALSE(processGone(pid)) << pid;
  process->signal(SIGKILL);
  ASSERT_EQ(process->wait(5s), 128 + SIGKILL);
  for (pid_t pid : all) EXPECT_TRUE(goneWithin(pid, 1s)) << "pid " << pid << " survived ddprun";
}

// A daemon a worker detaches (double fork + setsid: outside the worker's
// process group, no death-of-parent signal) dies with its worker group:
// after a normal exit, after a failure, and after SIGKILL of ddprun.
std::string detachDaemon(const fs::path& pidFile) {
  // Waits until the daemon is `sleep` (not still the shell before its exec),
  // so the report can name it.
  const std::string f = pidFile.string();
  return "setsid -f sh -c 'echo $$ > " + f +
         "; exec sleep 300'; i=0; while [ \"$(cat /proc/$(cat " + f +
         " 2>/dev/null)/comm 2>/dev/null)\" != sleep ] && [ $i -lt 500 ]; do sleep 0.01; " +
         "i=$((i+1)); done; ";
}

pid_t readPid(const fs::path& file) {
  pid_t pid = 0;
  std::ifstream(file) >> pid;
  return pid;
}

TEST(Launcher, NoDetachedDaemonOutlivesItsWorkers) {
  for (const std::string exit : {"exit 0", "exit 3"}) {
    SCOPED_TRACE(exit);
    const fs::path pidFile = scratch() / fmt::format("daemon-{}.pid", exit.back());
    const auto r = runDdprun(sh(detachDaemon(pidFile) + exit));
    EXPECT_EQ(r.code, exit == "exit 0" ? 0 : 3) << r.err;
    const pid_t daemon = readPid(pidFile);
    ASSERT_GT(daemon, 0) << r.err;
    EXPECT_TRUE(goneWithin(daemon, 2s)) << "the daemon survived: " << r.err;
    EXPECT_NE(r.err.find(fmt::format("ddprun killed 1 process the workers left running: pid {} "
                                     "(sleep)",
                                     daemon)),
              std::string::npos)
        << r.err;
  }
}

// The group after a failure whose daemon was killed starts cleanly: its
// workers are born in a new cgroup (a cgroup that was cgroup.kill'ed kills
// what is cloned into it on the kernels seen here).
TEST(Launcher, TheGroupAfterKilledLeftoversStartsNormally) {
  const fs::path pidFile = scratch() / "daemon.pid";
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--max_restarts=1", "--log_prefix="},
                     sh("if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then " + detachDaemon(pidFile) +
                        "exit 3; fi; echo attempt $TORCHELASTIC_RESTART_COUNT rank $RANK")));
  EXPECT_EQ(r.code, 0) << r.err;
  auto ranks = linesWith(r.out, "attempt 1 rank ");
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<std::string>{"0", "1"})) << r.out;
  EXPECT_NE(r.err.find("ddprun killed"), std::string::npos) << r.err;
}

TEST(Launcher, NoDetachedDaemonOutlivesASigkilledDdprun) {
  const fs::path dir = scratch();
  const fs::path pids = dir / "pids";
  const fs::path pidFile = dir / "daemon.pid";
  std::vector<pid_t> workers;
  auto process =
      startAndWait(args({"--nproc_per_node=1"},
                        sh(detachDaemon(pidFile) + "echo $$ >> " + pids.string() + "; sleep 300")),
                   pids, 1, workers);
  ASSERT_EQ(workers.size(), 1u);
  const pid_t daemon = readPid(pidFile);
  ASSERT_GT(daemon, 0);
  ASSERT_FALSE(processGone(daemon));
  process->signal(SIGKILL);
  ASSERT_EQ(process->wait(5s), 128 + SIGKILL);
  EXPECT_TRUE(goneWithin(workers[0], 2s));
  // Needs the cgroup (see docs/self-healing.md): where none can be made,
  // ddprun says so at start, and this guarantee does not hold.
  EXPECT_EQ(process->stderrText().find("no cgroup for the workers"), std::string::npos)
      << process->stderrText();
  EXPECT_TRUE(goneWithin(daemon, 3s)) << "the detached daemon survived ddprun's SIGKILL";
}

TEST(Launcher, EachWorkerHasItsOwnProcessGroup) {
  const auto r = runDdprun(args({"--nproc_per_node=2", "--log_prefix="},
                                sh("echo PG $$ $(cut -d' ' -f5 /proc/$$/stat)")));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = linesWith(r.out, "PG ");
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    std::istringstream in(line);
    std::string pid, pgid;
    in >> pid >> pgid;
    EXPECT_EQ(pid, pgid);
  }
}

TEST(Launcher, NoDescriptorOfTheAgentLeaksIntoWorkers) {
  // ls lists its own descriptors: the three standard ones plus the
  // directory it opened, which takes the lowest free number (3) unless
  // something leaked.
  const auto r = runDdprun({"--nproc_per_node=2", "--log_prefix=", "/bin/ls", "/proc/self/fd"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto fds = linesWith(r.out, "");
  std::sort(fds.begin(), fds.end());
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "0", "1", "1", "2", "2", "3", "3"})) << r.out;
}

TEST(Launcher, LocalRankMacroIsSubstituted) {
  const auto r = runDdprun(
      {"--nproc_per_node=3", "--log_prefix=", "/bin/echo", "id=${local_rank}", "x${local_rank}y"});
  ASSERT_EQ(r.code, 0);
  auto lines = linesWith(r.out, "id=");
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"0 x0y", "1 x1y", "2 x2y"}));
}

TEST(Launcher, LogFilesFollowTorchrunsLayout) {
  const fs::path dir = scratch();
  const auto r =
      runDdprun(args({"--nproc_per_node=2", "--log_dir=" + dir.string(), "--rdzv_id=layout",
                      "--redirects=3", "--max_restarts=1"},
                     sh("echo out $RANK $TORCHELASTIC_RESTART_COUNT; echo err $RANK >&2; " +
                        afterRankZero(dir / "flag") +
                        "[ $TORCHELASTIC_RESTART_COUNT$RANK = 01 ] && exit 1; exit 0")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("out "), std::string::npos) << "redirected output reached the console";
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      const fs::path rankDir = harness::launchDir(dir, "layout") /
                               fmt::format("attempt_{}", attempt) / std::to_string(rank);
      std::ifstream out(rankDir / "stdout.log");
      std::string line;
      std::getline(out, line);
      EXPECT_EQ(line, fmt::format("out {} {}", rank, attempt)) << rankDir;
      std::ifstream err(rankDir / "stderr.log");
      std::getline(err, line);
      EXPECT_EQ(line, fmt::format("err {}", rank));
    }
  }
}

TEST(Launcher, TeeWritesFilesAndConsole) {
  const fs::path dir = scratch();
  const auto r = runDdprun(args({"--log_dir=" + dir.string(), "--rdzv_id=tee", "--tee=1"},
                                sh("echo visible; echo hidden-err >&2")));
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("[rank 0]: visible"), std::string::npos);
  EXPECT_NE(r.err.find("[rank 0]: hidden-err"), std::string::npos);
  std::ifstream out(harness::launchDir(dir, "tee") / "attempt_0/0/stdout.log");
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "visible");
  EXPECT_FALSE(fs::exists(harness::launchDir(dir, "tee") / "attempt_0/0/stderr.log"));
}

TEST(Launcher, PerRankRedirectsAcceptMultiDigitRanks) {
  const fs::path dir = scratch();
  const auto r = runDdprun(args({"--nproc_per_node=12", "--log_dir=" + dir.string(),
                                 "--rdzv_id=many", "--redirects=11:1,3:1"},
                                sh("echo hi $LOCAL_RANK")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("[rank 11]: hi"), std::string::npos);
  EXPECT_EQ(r.out.find("[rank 3]: hi"), std::string::npos);
  EXPECT_NE(r.out.find("[rank 10]: hi 10"), std::string::npos);
  EXPECT_TRUE(fs::exists(harness::launchDir(dir, "many") / "attempt_0/11/stdout.log"));
}

TEST(Launcher, LocalRanksFilterShowsOnlyChosenRanks) {
  const auto r =
      runDdprun(args({"--nproc_per_node=3", "--local_ranks_filter=1"}, sh("echo me $LOCAL_RANK")));
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(linesWith(r.out, "[rank "), (std::vector<std::string>{"1]: me 1"}));
}

TEST(Launcher, PrefixedLinesNeverInterleaveUnderConcurrentOutput) {
  // Four workers write 20,000 lines of 300 bytes each as fast as they can.
  const auto r = runDdprun(
      args({"--nproc_per_node=4"}, sh("line=$(printf \"$RANK%.0s\" $(seq 300)); yes \"$line\" | "
                                      "head -n 20000")),
      {}, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<int, int> counts;
  std::istringstream in(r.out);
  std::string line;
  int bad = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(\[rank (\d)\]: (\d+))")) &&
        m[2].str() == std::string(300, m[1].str()[0])) {
      counts[std::stoi(m[1].str())]++;
    } else {
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(counts[rank], 20000) << rank;
}

TEST(Launcher, FinalPartialLineIsFlushed) {
  const auto r = runDdprun(sh("printf 'no newline at the end'"));
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "[rank 0]: no newline at the end\n");
}

TEST(Launcher, PrefixTemplateAndTorchelasticVariable) {
  auto r = runDdprun(
      args({"--nproc_per_node=2", "--role=w", "--log_prefix=<${role_name}${local_rank}|${rank}> "},
           sh("echo x")));
  EXPECT_NE(r.out.find("<w1|1> x"), std::string::npos) << r.out;
  r = runDdprun(sh("echo y"),
                {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${rank}]:"}});
  EXPECT_NE(r.out.find("[default0]:y"), std::string::npos) << r.out;
}

TEST(Launcher, PythonScriptsRunUnderPythonExec) {
  const fs::path dir = scratch();
  std::ofstream(dir / "train.py") << "import os, sys\n"
                                  << "print('py', os.environ['RANK'], sys.argv[1:], "
                                     "sys.flags.unbuffered if hasattr(sys.flags, 'unbuffered') "
                                     "else '')\n";
  const auto r = runDdprun({"--nproc_per_node=2", (dir / "train.py").string(), "--lr", "0.1"},
                           {{"PYTHON_EXEC", "/usr/bin/python3"}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1]: py 1 ['--lr', '0.1']"), std::string::npos) << r.out;
  const auto m = runDdprun({"-m", "json.tool", "--help"}, {{"PYTHON_EXEC", "/usr/bin/python3"}});
  EXPECT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.out.find("usage"), std::string::npos) << m.out;
}

TEST(Launcher, HelpListsEveryOption) {
  const auto r = runDdprun({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* option : {"--nproc_per_node",
                             "--nnodes",
                             "--node_rank",
                             "--master_addr",
                             "--master_port",
                             "--standalone",
                             "--rdzv_backend",
                             "--rdzv_endpoint",
                             "--rdzv_id",
                             "--rdzv_conf",
                             "--max_restarts",
                             "--monitor_interval",
                             "--role",
                             "--log_dir",
                             "--redirects",
                             "--tee",
                             "--local_ranks_filter",
                             "--run_path",
                             "--module",
                             "--no_python",
                             "--local_addr",
                             "--shutdown_timeout",
                             "--log_prefix"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
}

// Bad input: one clear line naming the problem, exit code 2, nothing run.
TEST(Launcher, BadInputFailsClearlyAndStartsNothing) {
  const fs::path dir = scratch();
  const std::string marker = (dir / "marker").string();
  const std::vector<std::string> touch = {"/usr/bin/touch", marker};
  const fs::path plainFile = dir / "not-executable";
  std::ofstream(plainFile) << "data\n";
  const fs::path fileAsDir = dir / "file";
  std::ofstream(fileAsDir) << "x";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {args({"--bogus"}, touch), "--bogus"},
      {args({"--nproc_per_node=0"}, touch), "--nproc_per_node=0 is not a positive number"},
      {args({"--nproc_per_node=-2"}, touch), "--nproc_per_node=-2"},
      {args({"--nproc_per_node=abc"}, touch), "'cpu', 'gpu', 'xpu' or 'auto'"},
      {args({"--nproc_per_node=xpu"}, touch), "no Intel GPU is visible"},
      {{"--nproc_per_node=2"}, "no program to run"},
      {{"./definitely-not-here"}, "does not exist"},
      {{"no-such-program-anywhere"}, "was not found on PATH"},
      {{plainFile.string()}, "is not an executable file"},
      {{(dir / "missing.py").string()}, "the script"},
      {args({"--redirects=4"}, touch), "--redirects"},
      {args({"--tee=0:9"}, touch), "--tee"},
      {args({"--redirects=x:1"}, touch), "local_rank:value"},
      {args({"--rdzv_conf=novalue"}, touch), "is not KEY=VALUE"},
      {args({"--rdzv_conf==x"}, touch), "has an empty key"},
      {args({"--rdzv_conf=jion_timeout=2"}, touch), "did you mean 'join_timeout'"},
      {args({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=::1"}, touch), "needs brackets"},
      {args({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=[::1]x"}, touch), "after ']'"},
      {args({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node1:"}, touch),
       "is not a port"},
      {args({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node1:0"}, touch),
       "only a single-node job"},
      {args({"--master_addr=node1:29500"}, touch), "without a port"},
      {args({"--start_method=thread"}, touch), "--start_method=thread"},
      {args({"--logs_specs=my_plugin"}, touch), "Python plugin"},
      {args({"--signals_to_handle=SIGTERM,SIGNOPE"}, touch), "'SIGNOPE' is not a signal"},
      {args({"--signals_to_handle=SIGKILL"}, touch), "cannot be forwarded"},
      {args({"--numa_binding=near"}, touch), "--numa_binding=near"},
      {args({"--event_log_handler=syslog"}, touch), "--event_log_handler=syslog"},
      {args({"--rdzv_conf=store_type=file"}, touch), "store_type=file"},
      {{"-m", "--no_python", "json.tool"}, "contradict"},
      {args({"--max_restarts=-1"}, touch), "--max_restarts=-1"},
      {args({"--shutdown_timeout=soon"}, touch), "--shutdown_timeout=soon"},
      {args({"--survivor_grace=-1"}, touch), "--survivor_grace=-1 is not a number of seconds"},
      {args({"--preload=auto,torch", "--run_path"}, touch),
       "--preload: 'auto' cannot be combined with module names"},
      {args({"--nnodes=2:1"}, touch), "MIN <= MAX"},
      {args({"--nnodes=2:4", "--rdzv_backend=c10d"}, touch), "needs --rdzv_endpoint"},
      {args({"--nnodes=2:4"}, touch), "is a range"},
      {args({"--standalone", "--nnodes=2"}, touch), "drop one of the two"},
      {args({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=host:x"}, touch),
       "is not a port"},
      {args({"--nnodes=2", "--rdzv_conf=join_timeout=soon"}, touch), "join_timeout=soon"},
      {args({"--node_rank=3"}, touch), "--node_rank=3"},
      {args({"--master_port=70000"}, touch), "--master_port=70000"},
      {args({"--local_ranks_filter=5"}, touch), "--local_ranks_filter=5"},
      {args({"--rdzv_backend=etcd"}, touch), "--rdzv_backend=etcd needs --rdzv_endpoint"},
      {args({"--rdzv_backend=zookeeper"}, touch), "is not static, c10d, etcd or etcd-v2"},
      {args({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379",
             "--rdzv_conf=protocol=ftp"},
            touch),
       "protocol=ftp is not http or https"},
      {args({"--nnodes=2", "--rdzv_backend=etcd-v2", "--rdzv_endpoint=https://h:2379",
             "--rdzv_conf=cacert=/nonexistent/ca.pem"},
            touch),
       "cacert=/nonexistent/ca.pem: no such file"},
      {args({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379",
             "--rdzv_conf=ca_cert=/etc/hostname"},
            touch),
       "add protocol=https"},
      {args({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379", "--worker_store=rank0"},
            touch),
       "cannot be used with --rdzv_backend=etcd"},
      {args({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379,",
             "--rdzv_conf=etcd_prefix=ddprun"},
            touch),
       "does not start with '/'"},
      {args({"--role="}, touch), "--role is empty"},
      {args({"--monitor_interval=-1"}, touch), "--monitor_interval=-1"},
      {args({"--log_dir=" + fileAsDir.string()}, touch), "is not a directory"},
      {args({"--nproc_per_node"}, {}), "--nproc_per_node"},
      {args({"--worker_store=both"}, touch), "--worker_store=both"},
      {args({"--strict_store", "--worker_store=agent"}, touch), "contradict"},
      {args({"--preload=torch"}, touch), "'touch' does not run under Python"},
      {args({"--preload=torch,a..b", "--run_path"}, touch),
       "--preload: 'a..b' is not a Python module name"},
      {args({"--preload=1st", "--run_path"}, touch), "'1st' is not a Python module name"},
  };
  for (const Case& c : cases) {
    const auto r =
        runDdprun(c.args, {{"PYTHON_EXEC", "/usr/bin/python3"},
                           {"DDPRUN_TOKEN", c.message == "needs a shared token" ? "" : "t"}});
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("ddprun: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(marker)) << "a worker ran for " << c.message;
  }
}

}  // namespace
}  // namespace ddprun
