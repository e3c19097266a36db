// torchrun 2.x command lines and the log guarantees of issue 10, on the real
// ddprun binary: options that torchrun has, logs that are never lost, and
// failures that are one clear line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "launcher_support.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::args;
using harness::ChildProcess;
using harness::freePort;
using harness::kDdprun;
using harness::launchDir;
using harness::linesWith;
using harness::runCommand;
using harness::runDdprun;
using harness::RunResult;
using harness::scratch;
using harness::sh;
namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TorchrunCompat, DoubleDashEndsTheOptions) {
  const auto r = runDdprun({"--nproc_per_node=2", "--log_prefix=", "--", "/bin/echo", "--tee=9"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "--tee=9").size(), 2u) << r.out;
}

TEST(TorchrunCompat, SingleNodeC10dOnPortZero) {
  const auto r =
      runDdprun({"--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nproc_per_node=2",
                 "--log_prefix=", "/bin/sh", "-c", "echo W $RANK $WORLD_SIZE"},
                {{"DDPRUN_TOKEN", ""}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "W ").size(), 2u) << r.out;
}

TEST(TorchrunCompat, AcceptedTorchrunOptionsWithTheirNotices) {
  const auto r = runDdprun({"--start-method=fork", "--logs_specs=default", "--role=r",
                            "--event-log-handler=null", "--monitor-interval=5", "/bin/true"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--start_method=fork has no effect"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--logs_specs=default is what ddprun always does"), std::string::npos);
  // The same from PET_* variables.
  const auto pet = runDdprun({"/bin/sh", "-c", "echo LR=$LOCAL_RANK CVD=$CUDA_VISIBLE_DEVICES"},
                             {{"PET_VIRTUAL_LOCAL_RANK", "1"},
                              {"PET_NPROC_PER_NODE", "2"},
                              {"CUDA_VISIBLE_DEVICES", "3,5"},
                              {"PET_LOG_LINE_PREFIX_TEMPLATE", "<${rank}> "}});
  ASSERT_EQ(pet.code, 0) << pet.err;
  EXPECT_NE(pet.out.find("<0> LR=0 CVD=3"), std::string::npos) << pet.out;
  EXPECT_NE(pet.out.find("<1> LR=0 CVD=5"), std::string::npos) << pet.out;
}

TEST(TorchrunCompat, NumaBindingWithoutAGpuIsANotice) {
  const auto r = runDdprun({"--numa_binding=node", "/bin/true"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--numa_binding=node has no effect"), std::string::npos) << r.err;
}

// torchrun 2.14's --print-completion: a script on stdout, exit 0, no
// program needed; an unknown shell is a usage error (exit 2).
TEST(TorchrunCompat, PrintCompletionGivesAWorkingBashScript) {
  // bash runs the script and completes "--nproc" as bash itself would.
  ChildProcess bash(
      {"/bin/bash", "-c",
       "eval \"$(\"$0\" --nproc_per_node=2 --print-completion bash)\" || exit 9; "
       "COMP_WORDS=(ddprun --nproc); COMP_CWORD=1; _ddprun; echo \"${COMPREPLY[*]}\"; "
       "complete -p ddprun",
       kDdprun});
  ASSERT_EQ(bash.wait(30s), 0) << bash.stderrText();
  EXPECT_EQ(linesWith(bash.stdoutText(), "--nproc"),
            (std::vector<std::string>{"_per_node --nproc-per-node"}))
      << bash.stdoutText();
  EXPECT_NE(bash.stdoutText().find("complete -o default -F _ddprun ddprun"), std::string::npos);
  const auto zsh = runDdprun({"--print_completion", "zsh"});
  EXPECT_EQ(zsh.code, 0);
  EXPECT_TRUE(zsh.out.starts_with("#compdef ddprun\n")) << zsh.out;
  const auto tcsh = runDdprun({"--print_completion", "tcsh"});
  EXPECT_EQ(tcsh.code, 0);
  EXPECT_NE(tcsh.out.find("complete ddprun 'c/--/(help version nproc_per_node"), std::string::npos)
      << tcsh.out;
  const auto ksh = runDdprun({"--print_completion", "ksh"});
  EXPECT_EQ(ksh.code, 2);
  EXPECT_NE(ksh.err.find("ksh not in {bash,zsh,tcsh}"), std::string::npos) << ksh.err;
  // After the program it is the program's argument.
  const auto echo = runDdprun({"--log_prefix=", "/bin/echo", "--print-completion", "bash"});
  EXPECT_EQ(echo.out, "--print-completion bash\n");
}

TEST(TorchrunCompat, OnlyTheGivenSignalsAreForwarded) {
  const fs::path dir = scratch();
  ChildProcess ddprun(
      {kDdprun, "--signals_to_handle=SIGUSR1", "--log_prefix=", "/bin/sh", "-c",
       "trap 'echo GOT-USR1; exit 3' USR1; echo ENV=$TORCHELASTIC_SIGNALS_TO_HANDLE;"
       " while true; do sleep 0.05; done"});
  const auto line = ddprun.readStdoutLine(10s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "ENV=SIGUSR1");
  ddprun.signal(SIGUSR1);
  const auto code = ddprun.wait(10s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 128 + SIGUSR1);
  EXPECT_NE(ddprun.stdoutText().find("GOT-USR1"), std::string::npos);
}

TEST(TorchrunCompat, ShutdownTimeoutFromTorchrunsVariable) {
  ChildProcess ddprun({kDdprun, "--log_prefix=", "/bin/sh", "-c",
                       "trap '' TERM; echo up; while true; do sleep 0.05; done"},
                      {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "1"}});
  ASSERT_TRUE(ddprun.readStdoutLine(10s));
  ddprun.signal(SIGTERM);
  const auto code = ddprun.wait(20s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 128 + SIGTERM);
  EXPECT_NE(ddprun.stderrText().find("did not exit within 1000 ms"), std::string::npos);
}

TEST(TorchrunCompat, DuplicateFiltersCopyMatchingTeedLines) {
  const fs::path dir = scratch();
  const auto r = runDdprun(
      args({"--nproc_per_node=2", "--tee=3", "--log_dir=" + dir.string(), "--rdzv_id=dup",
            "--duplicate_stdout_filters=apple,or,,ange", "--log_line_prefix_template=[${rank}] "},
           sh("echo apple $RANK; echo pear; echo 'or,ange'; echo kiwi >&2")));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string filtered = readFile(launchDir(dir, "dup") / "attempt_0/filtered_stdout.log");
  std::vector<std::string> lines = linesWith(filtered, "[");
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines,
            (std::vector<std::string>{"0] apple 0", "0] or,ange", "1] apple 1", "1] or,ange"}))
      << filtered;
  EXPECT_FALSE(fs::exists(launchDir(dir, "dup") / "attempt_0/filtered_stderr.log"));
}

TEST(TorchrunCompat, EventLogOnTheConsole) {
  const auto r = runDdprun(
      {"--event_log_handler=console", "--nproc_per_node=2", "/bin/sh", "-c", "exit $RANK"});
  EXPECT_EQ(r.code, 1) << r.err;
  int start = 0, failed = 0, agentFailed = 0;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    if (line.find(R"("name":"torchelastic.worker.status.START")") != std::string::npos) ++start;
    if (line.find(R"("name":"torchelastic.worker.status.FAILED")") != std::string::npos) {
      ++failed;
      EXPECT_NE(line.find(R"("global_rank":1)"), std::string::npos) << line;
      EXPECT_NE(line.find(R"("source":"WORKER")"), std::string::npos) << line;
    }
    if (line.find(R"("name":"torchelastic.agent.status.FAILED")") != std::string::npos) {
      ++agentFailed;
    }
  }
  EXPECT_EQ(start, 2) << r.err;
  EXPECT_EQ(failed, 1) << r.err;
  EXPECT_EQ(agentFailed, 1) << r.err;
}

// --- logs are never lost -----------------------------------------------------

TEST(TorchrunLogs, RedirectsWithoutLogDirKeepTheFilesAndSayWhere) {
  const auto r = runDdprun({"-r", "3", "--nproc_per_node=2", "/bin/sh", "-c", "echo out $RANK"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("logs are in (\\S+)"))) << r.err;
  const fs::path root = m[1].str();
  EXPECT_EQ(readFile(root / "attempt_0/1/stdout.log"), "out 1\n");
  fs::remove_all(root.parent_path());
}

TEST(TorchrunLogs, ASecondLaunchWithTheSameRunIdKeepsTheFirstOnesLogs) {
  const fs::path dir = scratch();
  for (const char* word : {"first", "second"}) {
    const auto r = runDdprun(
        {"--log_dir=" + dir.string(), "--rdzv_id=requeued", "-r", "1", "/bin/echo", word});
    ASSERT_EQ(r.code, 0) << r.err;
  }
  std::vector<std::string> contents;
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_TRUE(entry.path().filename().string().starts_with("requeued_")) << entry.path();
    contents.push_back(readFile(entry.path() / "attempt_0/0/stdout.log"));
  }
  std::sort(contents.begin(), contents.end());
  EXPECT_EQ(contents, (std::vector<std::string>{"first\n", "second\n"}));
}

TEST(TorchrunLogs, AFullDiskIsOneWarningAndTheConsoleGoesOn) {
  // RLIMIT_FSIZE makes the log file's writes fail (EFBIG) after 2,000 bytes,
  // as a full disk would (ENOSPC).
  const std::string limited = fmt::format(
      "prlimit --fsize=2000 {} --tee=1 --log_prefix= /bin/sh -c "
      "'i=0; while [ $i -lt 200 ]; do echo line-$i-"
      "..........................................................;"
      " i=$((i+1)); done'",
      kDdprun);
  const auto limitedRun = runDdprun({"--log_prefix=", "/bin/sh", "-c", limited + " 2>&1"});
  ASSERT_EQ(limitedRun.code, 0) << limitedRun.err;
  EXPECT_EQ(linesWith(limitedRun.out, "line-").size(), 200u);
  const std::regex warning("Cannot write the log file \\S+/attempt_0/0/stdout.log: File too large");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(limitedRun.out.begin(), limitedRun.out.end(), warning),
                    std::sregex_iterator()),
      1)
      << limitedRun.out;
}

bool canMakeAMountNamespace() {
  return runCommand({"/usr/bin/unshare", "-m", "/bin/true"}, {}, 10s).code == 0;
}

// Runs `script` with sh in a mount namespace of its own, where `disk` is a
// tmpfs of 1 MiB and 40 inodes (a small disk to fill) and TMPDIR is `tmp`.
RunResult runBesideASmallDisk(const fs::path& disk, const fs::path& tmp,
                              const std::string& script) {
  fs::create_directories(disk);
  fs::create_directories(tmp);
  const std::string inner = fmt::format(
      "set -e; mount -t tmpfs -o size=1m,nr_inodes=40 tmpfs {}; set +e; export TMPDIR={}; {}",
      disk.string(), tmp.string(), script);
  return runCommand({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", inner},
                    {}, 60s);
}

TEST(TorchrunLogs, ADiskWithoutInodesMovesTheRestartsLogsAndTheJobGoesOn) {
  // --log_dir is a small disk; rank 1 of attempt 0 uses all its inodes (as a
  // full ext4 disk refuses new directories) and fails: the restart cannot
  // create attempt_1 there.
  if (!canMakeAMountNamespace()) {
    GTEST_SKIP() << "this machine cannot make a mount namespace (needs root)";
  }
  const fs::path full = scratch() / "full";
  const fs::path tmp = scratch() / "tmp";
  const std::string worker = fmt::format(
      "echo restart $TORCHELASTIC_RESTART_COUNT; if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && "
      "[ $RANK = 1 ]; then i=0; while touch {0}/fill-$i 2>/dev/null; do i=$((i+1)); done; "
      "exit 1; fi",
      full.string());
  const auto r = runBesideASmallDisk(
      full, tmp,
      fmt::format("exec {} --nproc_per_node=2 --max_restarts=1 --tee=3 --log_prefix= "
                  "--log_dir={}/logs /bin/sh -c '{}'",
                  kDdprun, full.string(), worker));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(linesWith(r.out, "restart 1").size(), 2u) << r.out;
  const std::regex moved(
      "Cannot create the log directory \\S+/attempt_1: No space left on device; this launch's "
      "later logs and error files go to (\\S+) instead\\.");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, moved)) << r.err;
  const fs::path instead = m[1].str();
  EXPECT_EQ(instead.parent_path(), tmp);
  EXPECT_EQ(readFile(instead / "attempt_1/0/stdout.log"), "restart 1\n");
  EXPECT_EQ(readFile(instead / "attempt_1/1/stdout.log"), "restart 1\n");
}

TEST(TorchrunLogs, ALaunchOnAFullLogDiskPutsItsLogsUnderTmpdirAndItsWorkersRun) {
  // --log_dir lies on a small disk whose bytes and inodes are all used
  // before ddprun starts, as on a node where a scheduler starts an agent
  // again after the log disk filled up.
  if (!canMakeAMountNamespace()) {
    GTEST_SKIP() << "this machine cannot make a mount namespace (needs root)";
  }
  const fs::path full = scratch() / "full";
  const fs::path tmp = scratch() / "tmp";
  const auto r = runBesideASmallDisk(
      full, tmp,
      fmt::format("mkdir {0}/logs; dd if=/dev/zero of={0}/fill bs=64k 2>/dev/null; i=0; "
                  "while touch {0}/fill-$i 2>/dev/null; do i=$((i+1)); done; exec {1} "
                  "--nproc_per_node=2 --tee=3 --log_prefix= --log_dir={0}/logs /bin/sh -c "
                  "'echo rank $RANK'",
                  full.string(), kDdprun));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(linesWith(r.out, "rank ").size(), 2u) << r.out;
  const std::regex moved(
      "Cannot create this launch's log directory in \\S+/logs: No space left on device; its logs "
      "and error files go to (\\S+) instead\\.");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, moved)) << r.err;
  const fs::path instead = m[1].str();
  EXPECT_EQ(instead.parent_path().parent_path(), tmp);
  EXPECT_EQ(readFile(instead / "attempt_0/0/stdout.log"), "rank 0\n");
  EXPECT_EQ(readFile(instead / "attempt_0/1/stdout.log"), "rank 1\n");
}

TEST(TorchrunLogs, AStalledConsoleDoesNotDelaySigterm) {
  // ddprun's stdout is a pipe this test never reads: the worker fills it.
  ChildProcess ddprun(
      {kDdprun, "--shutdown_timeout=1", "/bin/sh", "-c",
       "echo ready >&2; while true; do echo "
       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done"});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string err;
  while (err.find("ready") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    err += ddprun.drainStderr();
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(500ms);  // the console queue fills, the worker blocks
  ddprun.signal(SIGTERM);
  // Bounded by --shutdown_timeout and the console's exit flush limit (2 s),
  // not by the console.
  const auto code = ddprun.wait(15s);
  ASSERT_TRUE(code) << "ddprun did not stop with its stdout stalled";
  EXPECT_EQ(*code, 128 + SIGTERM);
}

TEST(TorchrunLogs, RunningOutOfDescriptorsIsOneErrorAndACleanStop) {
  const std::string marker = fmt::format("{}.{}", 30 + ::getpid() % 1000, ::getpid());
  const auto r =
      runDdprun({"--log_prefix=", "/bin/sh", "-c",
                 fmt::format("prlimit --nofile=64:64 {} --nproc_per_node=100 /bin/sleep {}",
                             kDdprun, marker)});
  EXPECT_EQ(r.code, 127) << r.err;  // the root cause: a worker that could not start
  EXPECT_NE(r.err.find("Too many open files"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ulimit -n"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  const auto left = runDdprun({"/bin/sh", "-c", "pgrep -f '^/bin/sleep " + marker + "' | wc -l"});
  EXPECT_NE(left.out.find("]: 0"), std::string::npos) << "workers left behind: " << left.out;
}

// --- the launcher's own error file, ports, tokens -----------------------------

TEST(TorchrunCompat, LauncherErrorFileHoldsTheRootCause) {
  const fs::path dir = scratch();
  const fs::path file = dir / "launcher-error.json";
  auto r = runDdprun({"--nproc_per_node=2", "/bin/sh", "-c", "[ $RANK = 1 ] && exit 7; exit 0"},
                     {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  EXPECT_EQ(r.code, 7);
  std::string json = readFile(file);
  EXPECT_NE(json.find(R"("errorCode":7)"), std::string::npos) << json;
  EXPECT_NE(json.find("worker rank 1"), std::string::npos) << json;
  // A worker that wrote torchelastic's error file: its JSON, with errorCode.
  r = runDdprun(
      {"/bin/sh", "-c",
       R"(echo '{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "tb", "timestamp": "1"}}}' > $TORCHELASTIC_ERROR_FILE; exit 3)"},
      {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  EXPECT_EQ(r.code, 3);
  json = readFile(file);
  EXPECT_NE(json.find(R"("message":"ValueError: boom")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("errorCode":3)"), std::string::npos) << json;
}

// Not only a worker's failure: every failing exit of ddprun names its cause
// in the launcher's error file, as torchrun's @record writes its exception
// (a rendezvous that timed out, a signal).
TEST(TorchrunCompat, LauncherErrorFileOnAJoinTimeoutAndASignal) {
  const fs::path file = scratch() / "launcher-error.json";
  const auto r = runDdprun(
      {"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
       fmt::format("--master_port={}", freePort()), "--rdzv_conf=join_timeout=1", "/bin/true"},
      {{"TORCHELASTIC_ERROR_FILE", file.string()}}, 30s);
  EXPECT_EQ(r.code, 1) << r.err;
  std::string json = readFile(file);
  EXPECT_NE(json.find(R"("errorCode":1)"), std::string::npos) << json;
  EXPECT_NE(json.find("the rendezvous failed"), std::string::npos) << json;

  fs::remove(file);
  ChildProcess ddprun({kDdprun, "/bin/sh", "-c", "echo started; exec sleep 60"},
                      {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  std::optional<std::string> line;
  while ((line = ddprun.readStdoutLine(20s)) && line->find("started") == std::string::npos) {
  }
  ASSERT_TRUE(line.has_value());
  ddprun.signal(SIGTERM);
  EXPECT_EQ(ddprun.wait(30s), 128 + SIGTERM);
  json = readFile(file);
  EXPECT_NE(json.find(R"("errorCode":143)"), std::string::npos) << json;
  EXPECT_NE(json.find("received SIGTERM"), std::string::npos) << json;
}

TEST(TorchrunCompat, StaticNodeZeroWithATakenPortFailsAtOnce) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const auto r = runDdprun({"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
                            fmt::format("--master_port={}", port), "/bin/true"},
                           {}, 20s);
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(fmt::format("--master_port={} is already in use", port)), std::string::npos)
      << r.err;
}

TEST(TorchrunCompat, TwoStaticNodesWithoutATokenRunAsUnderTorchrun) {
  const std::uint16_t port = freePort();
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    nodes.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{kDdprun, "--nproc_per_node=2", "--nnodes=2",
                                 fmt::format("--node_rank={}", rank), "--master_addr=127.0.0.1",
                                 fmt::format("--master_port={}", port), "--log_prefix=", "/bin/sh",
                                 "-c", "echo W $RANK $WORLD_SIZE"},
        std::map<std::string, std::string>{{"DDPRUN_TOKEN", ""}}));
  }
  std::set<std::string> lines;
  std::size_t notices = 0;  // said once per job, by group rank 0's node
  for (auto& node : nodes) {
    const auto code = node->wait(60s);
    const std::string err = node->stderrText();
    ASSERT_TRUE(code);
    EXPECT_EQ(*code, 0) << err;
    notices += linesWith(err, "ddprun: notice: the rendezvous store at 127.0.0.1:").size();
    for (const auto& line : linesWith(node->stdoutText(), "W ")) lines.insert(line);
  }
  EXPECT_EQ(notices, 1u);
  EXPECT_EQ(lines, (std::set<std::string>{"0 4", "1 4", "2 4", "3 4"}));
}

}  // namespace
}  // namespace ddprun
