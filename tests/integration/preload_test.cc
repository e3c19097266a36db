// --preload: Python workers forked from a per-node zygote that imported
// torch once. Every test runs twice (CMake): under Debian's python3-torch
// 1.13.1 and, with DDPRUN_TEST_PYTHON set to scripts/torch2-python, under
// PyTorch 2.6 from the Debian trixie root.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher_support.h"
#include "python_scripts.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::goneWithin;
using harness::linesWith;
using harness::processGone;
using harness::runDdprun;
using harness::scratch;
using harness::startAndWait;
using harness::testPython;
using harness::writeScript;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kPython = {{"PYTHON_EXEC", testPython()},
                                                    {"DDPRUN_TEST_MARK", "a b=c"}};

std::vector<std::string> sorted(std::vector<std::string> lines) {
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Zygotes (their cmdline names preload_zygote.py) whose parent is `parent`.
std::vector<pid_t> zygotesOf(pid_t parent) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    const std::string text((std::istreambuf_iterator<char>(cmdline)), {});
    if (text.find("preload_zygote.py") == std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) found.push_back(std::stoi(name));
  }
  return found;
}

// Two workers forked from a zygote that preloaded torch, one restart.
harness::RunResult runWithOneRestart(const fs::path& script) {
  return runDdprun({"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", "--preload=torch",
                    script.string()},
                   kPython, 120s);
}

TEST(Preload, DdpTrainsToTheSameChecksumAsWithout) {
  // Whether torch was already imported when the script began, then the
  // DDP regression of python_workers_test.cc.
  const auto script =
      writeScript(scratch(), "ddp_train.py",
                  std::string("import sys\nprint('preloaded', 'torch' in sys.modules)\n") +
                      harness::kDdpTrainScript);
  const auto plain = runDdprun(
      {"--nproc_per_node=2", "--log_prefix=", "--preload=off", script.string()}, kPython, 120s);
  ASSERT_EQ(plain.code, 0) << plain.err;
  // No flag: a Python program is preloaded (--preload auto).
  const auto preloaded =
      runDdprun({"--nproc_per_node=2", "--log_prefix=", script.string()}, kPython, 120s);
  ASSERT_EQ(preloaded.code, 0) << preloaded.err;
  EXPECT_EQ(linesWith(plain.out, "preloaded "), (std::vector<std::string>{"False", "False"}));
  EXPECT_EQ(linesWith(preloaded.out, "preloaded "), (std::vector<std::string>{"True", "True"}));
  const auto sums = linesWith(preloaded.out, "checksum ");
  ASSERT_EQ(sums.size(), 2u) << preloaded.out;
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sorted(sums), sorted(linesWith(plain.out, "checksum ")));
  EXPECT_EQ(sorted(linesWith(preloaded.out, "step ")), sorted(linesWith(plain.out, "step ")));
  EXPECT_NE(preloaded.err.find("Preloaded torch in"), std::string::npos) << preloaded.err;
}

// Everything a worker can observe of its process, printed as one line per
// rank; values that differ between any two launches are left out.
const char kProbe[] = R"py(
import ctypes, json, os, signal, sys
preloaded = "torch" in sys.modules
varying = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "DDPRUN_TOKEN", "TORCHELASTIC_ERROR_FILE",
           "DDPRUN_STORE_PORT", "DDPRUN_STORE_PREFIX", "DDPRUN_PROGRESS_PIPE", "PYTHONPATH",
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
libc = ctypes.CDLL(None)
pdeathsig = ctypes.c_int()
libc.prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)
# glibc's own record of this thread: its tid, and the robust-mutex list
# registered with the kernel (what glibc's fork() sets up in a child).
libc.pthread_self.restype = ctypes.c_void_p
offset = (ctypes.c_uint32 * 3).in_dll(libc, "_thread_db_pthread_tid")[2]
glibc_tid = ctypes.c_int.from_address(libc.pthread_self() + offset).value
head, size = ctypes.c_void_p(), ctypes.c_size_t()
import platform
libc.syscall({"x86_64": 274, "aarch64": 100}[platform.machine()], 0, ctypes.byref(head),
             ctypes.byref(size))
names = ["SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD", "SIGHUP", "SIGUSR1", "SIGXFSZ", "SIGQUIT"]
state = {
    "env": {k: ("*" if k in varying else v) for k, v in os.environ.items()},
    "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "path0": sys.path[0],
    "main": sorted((k, repr(v) if k in ("__name__", "__file__", "__package__", "__cached__",
                                         "__doc__") else type(v).__name__)
                   for k, v in globals().items() if k.startswith("__")),
    "cwd": os.getcwd(), "parent": open(f"/proc/{os.getppid()}/comm").read().strip(),
    "own_group": os.getpgid(0) == os.getpid(), "pdeathsig": pdeathsig.value,
    "signals": {n: str(signal.getsignal(getattr(signal, n))) for n in names},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "affinity": sorted(os.sched_getaffinity(0)), "threads": len(os.listdir("/proc/self/task")),
    "stdout": [os.readlink(f"/proc/self/fd/{fd}")[:5] for fd in (1, 2)],
    "write_through": sys.stdout.write_through, "stdin": os.path.exists("/proc/self/fd/0"),
    "main_module": sys.modules["__main__"] is sys.modules[__name__],
    "glibc_tid_is_pid": glibc_tid == os.getpid(), "robust_list": bool(head.value),
}
print("STATE", os.environ["RANK"], json.dumps(state, sort_keys=True))
print("PRELOADED", preloaded)
sys.exit(int(sys.argv[2]))
)py";

TEST(Preload, EachRankHasTheProcessStateOfAnExecdWorker) {
  const fs::path dir = scratch();
  writeScript(dir, "probe.py", kProbe);
  fs::create_directories(dir / "pkg");
  writeScript(dir, "pkg/__init__.py", "");
  writeScript(dir, "pkg/probe.py", kProbe);
  writeScript(dir, "probe_script", kProbe);  // no .py: run with --run_path
  const std::vector<std::vector<std::string>> programs = {
      {(dir / "probe.py").string()}, {"-m", "pkg.probe"}, {"--run_path", "probe_script"}};
  for (const auto& program : programs) {
    SCOPED_TRACE(program.back());
    // No flag (--preload auto) against exec'd workers (--preload=off).
    std::vector<std::string> preloadArgs = {"--nproc_per_node=3",
                                            "--log_prefix=", "--max_restarts=0"};
    preloadArgs.insert(preloadArgs.end(), program.begin(), program.end());
    preloadArgs.insert(preloadArgs.end(), {"arg 1", "0"});
    auto args = preloadArgs;
    args.insert(args.begin(), "--preload=off");
    auto run = [&](const std::vector<std::string>& a) {
      std::vector<std::string> full = {"/bin/sh",    "-c", "cd \"$0\" && shift && exec \"$@\"",
                                       dir.string(), "_",  harness::kDdprun};
      full.insert(full.end(), a.begin(), a.end());
      return harness::runCommand(full, kPython, 120s);
    };
    const auto plain = run(args);
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto preloaded = run(preloadArgs);
    ASSERT_EQ(preloaded.code, 0) << preloaded.err;
    EXPECT_EQ(linesWith(preloaded.out, "PRELOADED "), std::vector<std::string>(3, "True"));
    const auto expected = sorted(linesWith(plain.out, "STATE "));
    ASSERT_EQ(expected.size(), 3u) << plain.out;
    EXPECT_NE(expected[0].find("\"pdeathsig\": 9"), std::string::npos) << expected[0];
    const auto got = sorted(linesWith(preloaded.out, "STATE "));
    ASSERT_EQ(got.size(), 3u) << preloaded.out;
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]);
  }
}

TEST(Preload, ExitCodesTracebacksAndErrorFilesAreThoseOfAnExecdWorker) {
  const auto script = writeScript(scratch(), "raises.py", R"py(
import os, sys
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch shape on rank 1")
    sys.exit(0)
main()
)py");
  for (const bool preload : {false, true}) {
    SCOPED_TRACE(preload);
    std::vector<std::string> args = {"--nproc_per_node=2", script.string()};
    if (!preload) args.insert(args.begin(), "--preload=off");
    const auto r = runDdprun(args, kPython, 120s);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("message    : ValueError: bad batch shape on rank 1"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("rank       : 1"), std::string::npos) << r.err;
    // The traceback starts in the script: no frame of the zygote.
    EXPECT_EQ(r.err.find("preload_zygote"), std::string::npos) << r.err;
  }
}

// Whether torch was imported before the script began, then the restart
// regression of python_workers_test.cc (rank 0 fails in attempt 0).
std::string flakyPreloaded() {
  return std::string("import sys\nprint('preloaded', 'torch' in sys.modules)\n") +
         harness::kFlakyScript;
}

// Attempt 1 must again be forked from the zygote, which imported torch once
// for both attempts.
TEST(Preload, RestartedWorkersAreForkedFromTheSameZygote) {
  const auto script = writeScript(scratch(), "flaky.py", flakyPreloaded());
  const auto r = runWithOneRestart(script);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "attempt "), std::vector<std::string>(2, "1 sum 2"));
  EXPECT_EQ(linesWith(r.out, "preloaded "), std::vector<std::string>(4, "True")) << r.out;
  std::size_t imports = 0;
  for (std::size_t at = r.err.find("Preloaded torch in"); at != std::string::npos;
       at = r.err.find("Preloaded torch in", at + 1)) {
    ++imports;
  }
  EXPECT_EQ(imports, 1u) << r.err;
}

// Each node forks its workers from its own zygote, in both attempts.
TEST(Preload, TwoNodesForkTheirWorkersFromTheirZygotes) {
  const auto script = writeScript(scratch(), "flaky_nodes.py", flakyPreloaded());
  std::vector<std::string> attempts;
  std::vector<std::string> preloaded;
  for (const auto& node : harness::runTwoStaticNodes(script, testPython(), {"--preload=torch"})) {
    ASSERT_TRUE(node.code) << node.err;
    EXPECT_EQ(*node.code, 0) << node.err;
    for (const auto& line : linesWith(node.out, "attempt ")) attempts.push_back(line);
    for (const auto& line : linesWith(node.out, "preloaded ")) preloaded.push_back(line);
    EXPECT_NE(node.err.find("Preloaded torch in"), std::string::npos) << node.err;
  }
  EXPECT_EQ(attempts, std::vector<std::string>(4, "1 sum 4"));
  EXPECT_EQ(preloaded, std::vector<std::string>(8, "True"));
}

// Attempt 0's rank 0 SIGKILLs the zygote and fails once it is reaped; the
// agent starts a new zygote and attempt 1 is forked from it.
TEST(Preload, ADeadZygoteIsReplaced) {
  const auto script = writeScript(scratch(), "kill_zygote.py", R"py(
import os, signal, sys, time
preloaded = "torch" in sys.modules
import torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
dist.barrier()  # every worker of the attempt was forked
if attempt == 0 and dist.get_rank() == 1:
    time.sleep(100)  # stopped when rank 0 fails
if attempt == 0:
    agent = os.getppid()
    for pid in os.listdir("/proc"):
        try:
            if not pid.isdigit() or b"preload_zygote.py" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            if int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) != agent:
                continue
        except OSError:
            continue
        os.kill(int(pid), signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}"):  # until the agent reaped it
            time.sleep(0.01)
        print("killed the zygote")
    sys.exit(1)
print(f"attempt {attempt} preloaded {preloaded}")
dist.destroy_process_group()
)py");
  const auto r = runWithOneRestart(script);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "killed the zygote"), std::vector<std::string>{""});
  EXPECT_EQ(linesWith(r.out, "attempt "), std::vector<std::string>(2, "1 preloaded True")) << r.out;
  EXPECT_NE(r.err.find("ended (killed by SIGKILL); starting a new one"), std::string::npos)
      << r.err;
}

TEST(Preload, SigkillOfDdprunLeavesNoZygoteAndNoWorker) {
  const fs::path dir = scratch();
  const fs::path pids = dir / "pids";
  const auto script = writeScript(dir, "sleeper.py",
                                  "import os, time\nopen('" + pids.string() +
                                      "', 'a').write(f'{os.getpid()}\\n')\ntime.sleep(1000)\n");
  std::vector<pid_t> workers;
  auto process = startAndWait({"--nproc_per_node=2", "--preload=torch", script.string()}, pids, 2,
                              workers, kPython, 120s);
  ASSERT_EQ(workers.size(), 2u) << process->stderrText();
  auto all = workers;
  const auto zygotes = zygotesOf(process->pid());
  ASSERT_EQ(zygotes.size(), 1u);
  all.push_back(zygotes[0]);
  for (pid_t pid : all) ASSERT_FALSE(processGone(pid)) << pid;
  process->signal(SIGKILL);
  ASSERT_EQ(process->wait(5s), 128 + SIGKILL);
  for (pid_t pid : all) EXPECT_TRUE(goneWithin(pid, 3s)) << "pid " << pid << " survived ddprun";
}

// ddprun's signals reach forked workers' handlers, and their output takes
// the usual routes: prefixed on the console, tee'd into the attempt's files.
TEST(Preload, SignalsAndLogsReachForkedWorkers) {
  const fs::path dir = scratch();
  const fs::path pids = dir / "pids";
  const fs::path logs = dir / "logs";
  const auto script =
      writeScript(dir, "handler.py",
                  "import os, signal, sys, time\n"
                  "def stop(sig, frame):\n"
                  "    print(f\"rank {os.environ['RANK']} got {sig}\", flush=True)\n"
                  "    sys.exit(0)\n"
                  "signal.signal(signal.SIGTERM, stop)\n"
                  "open('" +
                      pids.string() +
                      "', 'a').write(f'{os.getpid()}\\n')\n"
                      "time.sleep(100)\n");
  std::vector<pid_t> workers;
  auto process = startAndWait({"--nproc_per_node=2", "--preload=torch", "--tee=3",
                               "--log_dir=" + logs.string(), "--rdzv_id=sig", script.string()},
                              pids, 2, workers, kPython, 120s);
  ASSERT_EQ(workers.size(), 2u) << process->stderrText();
  process->signal(SIGTERM);
  EXPECT_EQ(process->wait(30s), 128 + SIGTERM);
  const std::string out = process->stdoutText();
  for (int rank : {0, 1}) {
    const std::string line = fmt::format("rank {} got {}", rank, SIGTERM);
    EXPECT_NE(out.find(fmt::format("[rank {}]: {}", rank, line)), std::string::npos) << out;
    const fs::path file =
        harness::launchDir(logs, "sig") / "attempt_0" / std::to_string(rank) / "stdout.log";
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find(line), std::string::npos) << file;
  }
  for (pid_t pid : workers) EXPECT_TRUE(goneWithin(pid, 3s));
}

// A signal while the zygote still imports (a slow shared file system) ends
// ddprun at once, zygote included.
TEST(Preload, ASignalDuringTheImportStopsDdprunAtOnce) {
  const fs::path dir = scratch();
  const fs::path started = dir / "importing";
  writeScript(dir, "slow_module.py",
              "import time\nopen('" + started.string() + "', 'w').close()\ntime.sleep(60)\n");
  const auto script = writeScript(dir, "main.py", "print('ran')\n");
  harness::ChildProcess process(
      {harness::kDdprun, "--nproc_per_node=2", "--preload=slow_module", script.string()}, kPython);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!fs::exists(started) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(fs::exists(started)) << process.stderrText();
  const auto zygotes = zygotesOf(process.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  process.signal(SIGTERM);
  EXPECT_EQ(process.wait(5s), 128 + SIGTERM) << process.stderrText();
  EXPECT_EQ(process.stdoutText().find("ran"), std::string::npos);
  EXPECT_TRUE(goneWithin(zygotes[0], 3s));
}

// A node of an elastic c10d job on 127.0.0.1:port (node 0 hosts the store).
std::unique_ptr<harness::ChildProcess> startElasticNode(std::uint16_t port, int index,
                                                        const std::string& nnodes,
                                                        const std::string& preload,
                                                        const fs::path& script) {
  std::vector<std::string> argv = {
      harness::kDdprun,
      "--nnodes=" + nnodes,
      "--nproc_per_node=2",
      "--rdzv_backend=c10d",
      fmt::format("--rdzv_endpoint=127.0.0.1:{}", port),
      "--rdzv_id=slow",
      fmt::format("--local_addr=127.0.0.{}", index + 1),
      fmt::format("--rdzv_conf=last_call_timeout=0.5,close_timeout=10,is_host={}",
                  index == 0 ? 1 : 0),
      "--log_prefix=",
      "--max_restarts=0"};
  if (!preload.empty()) argv.push_back("--preload=" + preload);
  argv.push_back(script.string());
  auto env = kPython;
  env["DDPRUN_TOKEN"] = "preload-test";
  return std::make_unique<harness::ChildProcess>(argv, env);
}

const char kSumScript[] = R"py(
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
print(f"world {os.environ['WORLD_SIZE']} sum {t.item():.0f}")
dist.destroy_process_group()
)py";

// An elastic job whose zygotes import a module that takes `seconds`; the
// import writes the zygote's pid to `started` first.
struct SlowImportJob {
  explicit SlowImportJob(int seconds) {
    writeScript(dir, "slow_module.py",
                fmt::format("import os, time\nopen('{0}.tmp', 'w').write(str(os.getpid()))\n"
                            "os.rename('{0}.tmp', '{0}')\ntime.sleep({1})\n",
                            started.string(), seconds));
  }
  std::unique_ptr<harness::ChildProcess> node(int index, const std::string& nnodes,
                                              const std::string& preload) const {
    return startElasticNode(port, index, nnodes, preload, script);
  }
  // Waits until `node` is in round 1 and its zygote imports the slow
  // module; `err` gets its stderr so far.
  bool inRoundAndImporting(harness::ChildProcess& node, std::string& err) const {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline &&
           !(fs::exists(started) && err.find("Round 1:") != std::string::npos)) {
      err += node.drainStderr();
      std::this_thread::sleep_for(10ms);
    }
    return fs::exists(started) && err.find("Round 1:") != std::string::npos;
  }
  fs::path dir = scratch();
  fs::path started = dir / "importing";
  fs::path script = writeScript(dir, "sum.py", kSumScript);
  std::uint16_t port = harness::freePort();
};

// Elastic: node A's round ends (node B joins) while A's group still waits
// for its zygote's import. A leaves that round and joins the next one, and
// its workers are forked for the round they belong to.
TEST(Preload, ARoundThatEndsDuringTheImportIsJoinedAgain) {
  const SlowImportJob job(4);
  auto first = job.node(0, "1:2", "torch,slow_module");
  std::string firstErr;
  ASSERT_TRUE(job.inRoundAndImporting(*first, firstErr)) << firstErr;
  auto second = job.node(1, "1:2", "");
  std::vector<std::string> sums;
  for (auto* node : {first.get(), second.get()}) {
    const auto code = node->wait(120s);
    const std::string err =
        node == first.get() ? firstErr + node->stderrText() : node->stderrText();
    ASSERT_TRUE(code) << err;
    EXPECT_EQ(*code, 0) << err;
    for (const auto& line : linesWith(node->stdoutText(), "world ")) sums.push_back(line);
    if (node == first.get()) {
      EXPECT_NE(err.find("Round 1 ended"), std::string::npos) << err;
    }
  }
  EXPECT_EQ(sums, std::vector<std::string>(4, "4 sum 4"));
}

// Node B's group waits for its zygote's import when the store's host, node
// A, is SIGKILLed: B ends at once with the store's loss as the error, not
// after the import, and its zygote goes with it.
TEST(Preload, LosingTheStoreDuringTheImportEndsTheNodeAtOnce) {
  const SlowImportJob job(60);
  auto host = job.node(0, "2:2", "");
  auto waiting = job.node(1, "2:2", "torch,slow_module");
  std::string err;
  ASSERT_TRUE(job.inRoundAndImporting(*waiting, err)) << err << host->stderrText();
  pid_t zygote = 0;
  std::ifstream(job.started) >> zygote;
  ASSERT_GT(zygote, 0);
  host->signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const auto code = waiting->wait(50s);
  err += waiting->stderrText();
  ASSERT_TRUE(code) << "still waiting for the import: " << err;
  EXPECT_EQ(*code, 1) << err;
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 20s) << err;
  EXPECT_NE(err.find("ddprun: error: lost "), std::string::npos) << err;
  EXPECT_TRUE(goneWithin(zygote, 5s)) << "zygote " << zygote << " outlived ddprun";
}

// A zygote that answers a pid that is not ddprun's child (here a preloaded
// module patches it to answer 1, init) is given up; the workers are exec'd
// and nothing else is signalled or waited for.
TEST(Preload, AZygoteAnsweringAForeignPidIsGivenUp) {
  const fs::path dir = scratch();
  writeScript(dir, "liar.py", "import sys\nsys.modules['__main__']._clone = lambda fd: 1\n");
  const auto script = writeScript(
      dir, "main.py", "import os, sys\nprint('ran', os.environ['RANK'], 'torch' in sys.modules)\n");
  const auto r =
      runDdprun({"--nproc_per_node=2", "--log_prefix=", "--preload=torch,liar", script.string()},
                kPython, 120s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(sorted(linesWith(r.out, "ran ")), (std::vector<std::string>{"0 False", "1 False"}))
      << r.out;
  EXPECT_NE(r.err.find("it answered pid 1, which is not a child of ddprun"), std::string::npos)
      << r.err;
}

TEST(Preload, PetPreloadIsTheOption) {
  const auto script = writeScript(scratch(), "main.py", "print('ran')\n");
  auto env = kPython;
  env["PET_PRELOAD"] = "no_such_module";
  const auto r = runDdprun({script.string()}, env, 60s);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("ddprun: error: --preload no_such_module: importing 'no_such_module' "
                       "failed: No module named 'no_such_module'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos);
}

TEST(Preload, AModuleThatStartsAThreadAtImportIsRefused) {
  const fs::path dir = scratch();
  writeScript(dir, "poller.py", R"py(
import threading, time
threading.Thread(target=time.sleep, args=(100,), name="poller", daemon=True).start()
)py");
  const auto script = writeScript(dir, "main.py", "print('ran')\n");
  const auto r =
      runDdprun({"--nproc_per_node=2", "--preload=torch,poller", script.string()}, kPython, 120s);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("ddprun: error: --preload torch,poller: importing 'poller' started 1 "
                       "thread(s) (Python thread 'poller')"),
            std::string::npos)
      << r.err;
}

// A library outside the program's directory (on PYTHONPATH) that notes
// each import as "<module> <pid> <RANK or none>" in $PRELOAD_MARKS: "none"
// is the zygote's import.
std::string markingLibrary(const std::string& name, const std::string& body = "") {
  return "import os\n"
         "with open(os.environ['PRELOAD_MARKS'], 'a') as f:\n"
         "    f.write('" +
         name + " %d %s\\n' % (os.getpid(), os.environ.get('RANK', 'none')))\n" + body;
}

// Imports the libraries, takes one optimizer step (the progress hook then
// reports the program's imports), prints which of them were imported before
// the program began; in attempt 0, rank 0 waits until the zygote imported
// `awaited` (its mark says "none"), then fails.
std::string learningProgram(const std::vector<std::string>& libraries, const std::string& awaited) {
  std::string names;
  for (const auto& name : libraries) names += "'" + name + "', ";
  return "import os, sys\n"
         "torch_before = 'torch' in sys.modules\n"
         "names = [" +
         names +
         "]\n"
         "before = [n for n in names if n in sys.modules]\n"
         "import select, torch\n"
         "for n in names: __import__(n)\n"
         "p = torch.nn.Parameter(torch.ones(1))\n"
         "opt = torch.optim.SGD([p], lr=0.1)\n"
         "p.sum().backward(); opt.step()\n"
         "attempt = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
         "print('attempt', attempt, 'rank', os.environ['RANK'], 'preloaded', torch_before,\n"
         "      ' '.join(before) or '-', flush=True)\n"
         "if attempt == 0 and os.environ['RANK'] == '0':\n"
         "    marks = os.environ['PRELOAD_MARKS']\n"
         "    while not any(l.split()[0] == '" +
         awaited +
         "' and l.split()[2] == 'none' for l in open(marks)):\n"
         "        select.select([], [], [], 0.05)  # until the zygote imported it\n"
         "    sys.exit(3)\n";
}

// No flag: the modules the program imported from outside its directory by
// its first step are preloaded for the restart; its own modules never.
TEST(Preload, TheProgramsImportsArePreloadedForTheRestart) {
  const fs::path dir = scratch();
  const fs::path libs = dir / "libs";
  const fs::path program = dir / "program";
  fs::create_directories(libs);
  fs::create_directories(program);
  writeScript(libs, "helperlib.py", markingLibrary("helperlib"));
  writeScript(program, "ownmod.py", markingLibrary("ownmod"));
  const auto script =
      writeScript(program, "train.py", learningProgram({"helperlib", "ownmod"}, "helperlib"));
  auto env = kPython;
  env["PYTHONPATH"] = libs.string();
  env["PRELOAD_MARKS"] = (dir / "marks").string();
  const auto r = runDdprun(
      {"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", script.string()}, env, 180s);
  ASSERT_EQ(r.code, 0) << r.err;
  // Attempt 0: torch from the zygote; attempt 1: helperlib too, not ownmod.
  EXPECT_EQ(sorted(linesWith(r.out, "attempt ")),
            (std::vector<std::string>{"0 rank 0 preloaded True -", "0 rank 1 preloaded True -",
                                      "1 rank 0 preloaded True helperlib",
                                      "1 rank 1 preloaded True helperlib"}))
      << r.out << r.err;
  EXPECT_NE(r.err.find("more modules the program imported"), std::string::npos) << r.err;
  std::ifstream marks(dir / "marks");
  const std::string text((std::istreambuf_iterator<char>(marks)), {});
  int zygoteImports = 0;
  for (std::istringstream lines(text); !lines.eof();) {
    std::string module, pid, rank;
    if (!(lines >> module >> pid >> rank)) break;
    EXPECT_FALSE(module == "ownmod" && rank == "none") << "the zygote imported ownmod:\n" << text;
    if (module == "helperlib" && rank == "none") ++zygoteImports;
  }
  EXPECT_EQ(zygoteImports, 1) << text;
}

// What the zygote must not import is left out, each with one line, and the
// job trains: a module that starts a thread, one that opens a GPU device
// (a CUDA initialisation, faked on this CPU machine by a file under /dev),
// one whose import fails there (it needs a rank). The zygote is rebuilt
// without each unsafe one and the restart is forked from it.
TEST(Preload, UnsafeOrFailingImportsAreLeftOutAndTheJobTrains) {
  const fs::path dir = scratch();
  const fs::path libs = dir / "libs";
  fs::create_directories(libs);
  const fs::path device = fmt::format("/dev/nvidia-ddprun-test-{}", ::getpid());
  std::ofstream(device) << "";
  ASSERT_TRUE(fs::exists(device)) << "cannot create " << device << " (the test runs as root)";
  writeScript(libs, "failinglib.py",
              "import os\nif 'RANK' not in os.environ:\n    raise ImportError('needs a rank')\n");
  writeScript(libs, "threadlib.py",
              markingLibrary("threadlib",
                             "import threading\n"
                             "threading.Thread(target=threading.Event().wait, name='poller', "
                             "daemon=True).start()\n"));
  writeScript(libs, "cudalib.py",
              markingLibrary("cudalib", "_device = open('" + device.string() + "')\n"));
  writeScript(libs, "markerlib.py", markingLibrary("markerlib"));
  const auto script = writeScript(
      dir, "train.py",
      learningProgram({"failinglib", "threadlib", "cudalib", "markerlib"}, "markerlib"));
  auto env = kPython;
  env["PYTHONPATH"] = libs.string();
  env["PRELOAD_MARKS"] = (dir / "marks").string();
  const auto r = runDdprun(
      {"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", script.string()}, env, 240s);
  fs::remove(device);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(sorted(linesWith(r.out, "attempt ")),
            (std::vector<std::string>{"0 rank 0 preloaded True -", "0 rank 1 preloaded True -",
                                      "1 rank 0 preloaded True markerlib",
                                      "1 rank 1 preloaded True markerlib"}))
      << r.out << r.err;
  EXPECT_NE(r.err.find("Preloading left out 'failinglib': importing it in the zygote failed "
                       "(ImportError: needs a rank)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Preloading left out 'threadlib': importing it started 1 thread(s) "
                       "(Python thread 'poller')"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Preloading left out 'cudalib': importing it opened " + device.string() +
                       " (CUDA initialised)"),
            std::string::npos)
      << r.err;
}

// Auto never fails a job: where torch cannot be imported, workers are
// exec'd, with one line.
TEST(Preload, WithoutAnImportableTorchWorkersAreExecd) {
  const fs::path dir = scratch();
  fs::create_directories(dir / "broken" / "torch");
  writeScript(dir / "broken" / "torch", "__init__.py", "raise ImportError('a broken install')\n");
  const auto script =
      writeScript(dir, "main.py", "import sys\nprint('ran', 'torch' in sys.modules)\n");
  auto env = kPython;
  env["PYTHONPATH"] = (dir / "broken").string();
  const auto r = runDdprun({"--nproc_per_node=2", "--log_prefix=", script.string()}, env, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "ran "), std::vector<std::string>(2, "False"));
  EXPECT_NE(r.err.find("Python workers are started without a preload zygote: importing torch "
                       "failed (ImportError: a broken install)"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace ddprun
