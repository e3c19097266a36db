// Unmodified PyTorch training scripts under ddprun, with the workers'
// TCPStore clients on the agent's store. The same tests run twice (CMake):
// under Debian's python3-torch 1.13.1 and, as TorchCurrent.*, with
// DDPRUN_TEST_PYTHON set to scripts/python (the project's environment with
// the current PyTorch, requirements/torch-current.txt).
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "launcher_support.h"
#include "python_scripts.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::linesWith;
using harness::runDdprun;
using harness::scratch;
using harness::testPython;
using harness::writeScript;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kPython = {{"PYTHON_EXEC", testPython()}};

TEST(PythonWorkers, DdpTrainingConvergesOnTheAgentStore) {
  const auto script = writeScript(scratch(), "ddp_train.py", harness::kDdpTrainScript);
  const auto r = runDdprun({"--nproc_per_node=2", "--log_prefix=", script.string()}, kPython, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(step 0 loss ([0-9.]+))"))) << r.out;
  const double first = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(step 59 loss ([0-9.]+))")));
  EXPECT_LT(std::stod(m[1]), first / 10) << r.out;
  const auto sums = linesWith(r.out, "checksum ");
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[0], sums[1]);  // DDP kept both replicas identical
}

TEST(PythonWorkers, RaisingScriptReportsThePythonException) {
  const auto script = writeScript(scratch(), "raises.py", R"(
import os, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad batch shape on rank 1")
    dist.barrier()
main()
)");
  const auto r = runDdprun({"--nproc_per_node=2", script.string()}, kPython, 120s);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("message    : ValueError: bad batch shape on rank 1"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Traceback (most recent call last):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank       : 1"), std::string::npos);
}

TEST(PythonWorkers, AFullLogDiskMovesTheProgressHookAndTheErrorFileSaysWhy) {
  // --log_dir is a 64 KiB tmpfs, full before ddprun starts, in a mount
  // namespace of the run's own (gone with it).
  if (harness::runCommand({"/usr/bin/unshare", "-m", "/bin/true"}, {}, 10s).code != 0) {
    GTEST_SKIP() << "this machine cannot make a mount namespace (needs root)";
  }
  const fs::path full = scratch() / "full";
  fs::create_directories(full);
  // Rank 1 fails once rank 0 has printed (ddprun stops the survivors of a
  // failure): they meet at a FIFO, whose opens wait for each other.
  const fs::path printed = scratch() / "rank0-printed";
  fs::remove(printed);
  ASSERT_EQ(::mkfifo(printed.c_str(), 0600), 0);
  const auto script = writeScript(scratch(), "hook.py",
                                  fmt::format(R"(
import os, sys, sitecustomize
print("hook", os.path.dirname(sitecustomize.__file__), flush=True)
if os.environ["RANK"] == "0":
    open("{0}", "w").close()
    sys.exit(0)
open("{0}").read()
sys.exit(3)
)",
                                              printed.string()));
  const std::string inner = fmt::format(
      "set -e; mount -t tmpfs -o size=64k tmpfs {0}; dd if=/dev/zero of={0}/fill bs=4k "
      "2>/dev/null || true; set +e; TORCHELASTIC_ERROR_FILE={0}/error.json {1} "
      "--nproc_per_node=2 --log_prefix= --log_dir={0}/logs {2} {3}; code=$?; "
      "echo left: $(ls {0}); exit $code",
      full.string(), harness::kDdprun, testPython(), script.string());
  const auto r = harness::runCommand(
      {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", inner}, {}, 120s);
  ASSERT_EQ(r.code, 3) << r.out << r.err;
  // The workers ran the hook from a private temporary directory, removed
  // when ddprun exited.
  const auto hooks = linesWith(r.out, "hook ");
  ASSERT_EQ(hooks.size(), 2u) << r.out << r.err;
  const fs::path hookDir = hooks[0];
  EXPECT_TRUE(hookDir.filename().string().starts_with("ddprun-hook-")) << hookDir;
  EXPECT_FALSE(fs::exists(hookDir)) << hookDir;
  EXPECT_NE(r.err.find("/progress_hook: No space left on device; it is in " + hookDir.string() +
                       " instead."),
            std::string::npos)
      << hookDir << "\n"
      << r.err;
  // The report is on stderr; its file could not be written, says why, and
  // leaves no temporary behind.
  EXPECT_NE(r.err.find("FAILED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Cannot write the error file " + (full / "error.json").string() +
                       " (TORCHELASTIC_ERROR_FILE): No space left on device."),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("left: fill logs\n"), std::string::npos) << r.out;
}

TEST(PythonWorkers, FailsOnceThenSucceedsAfterARestart) {
  // PyTorch 2.x uses the agent store without a per-attempt key prefix:
  // attempt 1 must not see attempt 0's Gloo addresses (torchrun 2.6 hangs
  // here; ddprun gives each attempt a new store).
  const auto script = writeScript(scratch(), "flaky.py", harness::kFlakyScript);
  const auto r = runDdprun(
      {"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", script.string()}, kPython, 120s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "attempt "), (std::vector<std::string>{"1 sum 2", "1 sum 2"}));
}

// The same on two nodes: the restarted round's workers get a store (on the
// node of group rank 0) that no earlier worker has written to.
TEST(PythonWorkers, TwoNodesRestartAfterAFailure) {
  const auto script = writeScript(scratch(), "flaky_nodes.py", harness::kFlakyScript);
  std::vector<std::string> lines;
  for (const auto& node : harness::runTwoStaticNodes(script, testPython(), {})) {
    ASSERT_TRUE(node.code) << node.err;
    EXPECT_EQ(*node.code, 0) << node.err;
    for (const auto& line : linesWith(node.out, "attempt ")) lines.push_back(line);
  }
  EXPECT_EQ(lines, (std::vector<std::string>(4, "1 sum 4")));
}

// What kStoreOpsScript must print under a PyTorch of `version` (major,
// minor) with `world` ranks: queues since 2.8, list_keys since 2.10, the
// store's BARRIER since 2.11.
void expectStoreOps(const std::string& out, int world) {
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(torch (\d+)\.(\d+))"))) << out;
  const std::pair<int, int> version{std::stoi(m[1]), std::stoi(m[2])};
  const auto has = [&](const std::string& line) { return out.find(line) != std::string::npos; };
  if (version >= std::pair{2, 8}) {
    for (int r = 1; r < world; ++r) {
      EXPECT_TRUE(has("rank " + std::to_string(r) + " popped item-")) << out;
    }
    EXPECT_TRUE(has("pop on an empty queue raised QueueEmptyError")) << out;
    EXPECT_TRUE(has("queue_len 0")) << out;
    EXPECT_TRUE(has("blocking pop timed out: True")) << out;
    EXPECT_TRUE(has("store usable after the timeout: ok")) << out;
  } else {
    EXPECT_TRUE(has("no queues in this PyTorch")) << out;
  }
  if (version >= std::pair{2, 10}) {
    EXPECT_TRUE(has("list_keys has every rank: True")) << out;
  }
  if (version >= std::pair{2, 11}) {
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(has("rank " + std::to_string(r) + " passed the store barrier")) << out;
    }
    EXPECT_TRUE(has("lonely barrier timed out: True")) << out;
    EXPECT_TRUE(has("raw client usable after the cancel: 1")) << out;
  }
}

TEST(PythonWorkers, QueuesListKeysAndBarrierOnTheAgentStore) {
  const auto script = writeScript(scratch(), "store_ops.py", harness::kStoreOpsScript);
  const auto r = runDdprun({"--nproc_per_node=3", "--log_prefix=", script.string()}, kPython, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  expectStoreOps(r.out, 3);
}

// The same on the store of a two-node round (hosted by node 0's agent).
TEST(PythonWorkers, QueuesListKeysAndBarrierOnARoundStore) {
  const auto script = writeScript(scratch(), "store_ops_nodes.py", harness::kStoreOpsScript);
  std::string out;
  for (const auto& node : harness::runTwoStaticNodes(script, testPython(), {})) {
    ASSERT_TRUE(node.code) << node.err;
    EXPECT_EQ(*node.code, 0) << node.err;
    out += node.out;
  }
  expectStoreOps(out, 4);
}

TEST(PythonWorkers, Torch113BehaviourWithRank0Store) {
  const auto script = writeScript(scratch(), "ddp_train_rank0.py", harness::kDdpTrainScript);
  const auto r =
      runDdprun({"--nproc_per_node=2", "--worker_store=rank0", "--log_prefix=", script.string()},
                kPython, 120s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "checksum ").size(), 2u);
}

TEST(PythonWorkers, NcclVariableMatchesTheWorkersPyTorch) {
  // One name only, the one this PyTorch reads: no deprecation warning on 2.x.
  const auto script = writeScript(scratch(), "nccl_env.py", R"(
import os, torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
new, old = "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"
want, other = (new, old) if (major, minor) >= (2, 2) else (old, new)
print("nccl-env", torch.__version__, os.environ.get(want), os.environ.get(other))
)");
  const auto r = runDdprun({"--log_prefix=", script.string()}, kPython, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = linesWith(r.out, "nccl-env ");
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_TRUE(lines[0].ends_with(" 1 None")) << lines[0];
}

TEST(PythonWorkers, TorchrunTwoOptionsUnderPython) {
  // torchrun 2.x's documented single-node c10d form, with its newer options.
  const fs::path dir = scratch() / "logs";
  fs::remove_all(dir);
  const auto script = writeScript(scratch(), "options.py", R"(
import os, torch.distributed as dist
dist.init_process_group("gloo")
print("hello from", dist.get_rank(), os.environ["LOCAL_RANK"], os.environ["CUDA_VISIBLE_DEVICES"],
      os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"])
dist.destroy_process_group()
)");
  const auto r = runDdprun(
      {"--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "--nproc-per-node=2",
       "--start-method=spawn", "--virtual-local-rank", "--tee=3", "--log-dir=" + dir.string(),
       "--duplicate-stdout-filters=hello", "--signals-to-handle=SIGTERM,SIGUSR1",
       "--log-line-prefix-template=${role_name}${rank}| ", "--rdzv-id=opts", "--", script.string()},
      kPython, 120s);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("default0| hello from 0 0 0 SIGTERM,SIGUSR1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("default1| hello from 1 0 1 SIGTERM,SIGUSR1"), std::string::npos) << r.out;
  const fs::path launch = harness::launchDir(dir, "opts");
  EXPECT_TRUE(fs::exists(launch / "attempt_0/filtered_stdout.log")) << r.err;
}

// A seed's script for `python -m torch.distributed.launch` (QuantumGrav,
// NNHandler): argparse reads --local_rank or --local-rank. Each worker
// writes what it was given: its arguments, the local rank argparse read,
// and the launcher's variables (values where they are the same in every
// run). TORCHELASTIC_SIGNALS_TO_HANDLE is left out: it tells the workers
// which signals this launcher handles, and ddprun's default list also has
// SIGUSR1 and SIGUSR2 (docs/cli.md; PyTorch 1.13 does not set it).
constexpr char kLegacyScript[] = R"py(
import argparse, json, os, re, sys
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
local = args.local_rank if args.local_rank >= 0 else int(os.environ["LOCAL_RANK"])
names = sorted(k for k in os.environ if re.fullmatch(
    r"(LOCAL_)?RANK|(LOCAL_|GROUP_|ROLE_)?WORLD_SIZE|GROUP_RANK|ROLE_(RANK|NAME)|MASTER_(ADDR|PORT)"
    r"|TORCHELASTIC_.*|(TORCH_)?NCCL_ASYNC_ERROR_HANDLING|OMP_NUM_THREADS", k)
    and k != "TORCHELASTIC_SIGNALS_TO_HANDLE")
stable = {k: os.environ[k] for k in names
          if k not in ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")}
t = __import__("torch").ones(1); dist.all_reduce(t)
with open(os.path.join(os.environ["OUT_DIR"], f"{local}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "local_rank": args.local_rank, "env": stable,
               "names": names, "sum": t.item()}, f)
dist.destroy_process_group()
)py";

// Each local rank's record from kLegacyScript, in order.
std::vector<std::string> legacyRecords(const fs::path& dir, int workers) {
  std::vector<std::string> records;
  for (int r = 0; r < workers; ++r) {
    std::ifstream in(dir / (std::to_string(r) + ".json"));
    records.push_back(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  return records;
}

// ddprun-launch takes the seeds' legacy command line with only the
// launcher's name changed, and each worker gets what it gets under this
// PyTorch's own torch.distributed.launch: the same arguments (the local
// rank spelt as that version spells it) and the same variables.
TEST(PythonWorkers, LegacyLaunchGivesWhatTorchDistributedLaunchGives) {
  const auto script = writeScript(scratch(), "legacy.py", kLegacyScript);
  for (const bool useEnv : {false, true}) {
    std::vector<std::string> options = {"--nproc_per_node=3",
                                        "--master_port=" + std::to_string(harness::freePort())};
    // Debian's PyTorch 1.13 under Python 3.11 needs these output options.
    for (const char* o : {"--redirects=1", "--tee=2"}) options.push_back(o);
    if (useEnv) options.push_back("--use_env");
    std::vector<std::vector<std::string>> records;
    for (const bool ours : {false, true}) {
      const fs::path out = scratch(fmt::format("out_{}_{}", useEnv, ours));
      std::vector<std::string> argv =
          ours ? std::vector<std::string>{harness::kBinDir + "/ddprun-launch"}
               : std::vector<std::string>{testPython(), "-m", "torch.distributed.launch"};
      argv.insert(argv.end(), options.begin(), options.end());
      argv.push_back("--log_dir=" + scratch(fmt::format("logs_{}_{}", useEnv, ours)).string());
      for (const char* a : {"--epochs", "2"}) argv.push_back(a);
      argv.insert(argv.end() - 2, script.string());
      const auto r =
          harness::runCommand(argv, {{"PYTHON_EXEC", testPython()}, {"OUT_DIR", out}}, 120s);
      ASSERT_EQ(r.code, 0) << (ours ? "ddprun-launch: " : "torch.distributed.launch: ") << r.err;
      records.push_back(legacyRecords(out, 3));
    }
    EXPECT_EQ(records[1], records[0]) << "use_env " << useEnv;
    EXPECT_NE(records[0][2].find(useEnv ? R"("local_rank": -1)" : R"("local_rank": 2)"),
              std::string::npos)
        << records[0][2];
  }
}

// PyTorch's own file timer (torch.distributed.elastic.timer.FileTimerClient)
// with TORCHELASTIC_ENABLE_FILE_TIMER=1: rank 1 hangs inside a timed scope
// in attempt 0; the agent kills it when the timer expires, the job restarts
// and finishes, and the report of a run without restarts names the scope.
const char kTimed[] = R"(
import os, time
from torch.distributed.elastic.timer import FileTimerClient
client = FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0:
    if os.environ["RANK"] == "1":
        client.acquire("stuck_step", time.time() + 1.0)
    time.sleep(120)  # rank 0 waits too, as in a collective, until the agent stops it
client.acquire("good_step", time.time() + 30)
time.sleep(0.2)
client.release("good_step")
print(f"attempt {attempt} done", flush=True)
)";

TEST(PythonWorkers, FileTimerKillsAHungWorkerAndTheJobRestarts) {
  const auto script = writeScript(scratch(), "timed.py", kTimed);
  auto env = kPython;
  env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1";
  const auto start = std::chrono::steady_clock::now();
  const auto r = runDdprun(
      {"--nproc_per_node=2", "--max_restarts=1", "--log_prefix=", script.string()}, env, 120s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s) << "waited for the sleep";
  EXPECT_EQ(linesWith(r.out, "attempt "), (std::vector<std::string>{"1 done", "1 done"}))
      << r.out << r.err;
  EXPECT_NE(r.err.find("Worker rank 1: file timer 'stuck_step'"), std::string::npos) << r.err;

  const auto failed =
      runDdprun({"--nproc_per_node=2", "--log_prefix=", script.string()}, env, 120s);
  EXPECT_EQ(failed.code, 128 + SIGKILL) << failed.err;
  EXPECT_NE(failed.err.find("rank       : 1"), std::string::npos) << failed.err;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(
      failed.err, m,
      std::regex(R"(cause      : file timer 'stuck_step' \(pid \d+\) expired \d+\.\d\d s past its )"
                 R"(deadline; ddprun sent it SIGKILL)")))
      << failed.err;
}

// --watchdog_timeout without any change to the script: in attempt 0 rank 1
// sleeps forever before an all_reduce that rank 0 (after 2.5 s of compute,
// more than two sampling periods) waits in. The node is found hung, rank 1
// is blamed, the job restarts and finishes. Should the two still tie in one
// sample (seen in CI: a late sample on a loaded machine; rank 1's Gloo
// thread reads what rank 0 sends), rank 1's CPU stopped first, which
// decides (HangWatchdog.ATieInTheSameSampleGoesToTheWorkerWhoseCpuStoppedFirst).
// Both ranks first meet through the store, polling it (I/O: neither looks
// stopped while it waits for the other): on a loaded machine rank 1 may
// still be in init_process_group when rank 0 is done computing. (With a
// Gloo barrier there instead, loaded runs twice saw rank 0 stop 2 s before
// rank 1, for a reason not found.)
// Each rank logs its stages, and its Python stacks when the group is
// stopped, so a failure of this test shows where each rank really was.
const char kHang[] = R"(
import faulthandler, signal, sys
faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
import os, time
def log(m): print(f"{time.time():.3f} r{os.environ['RANK']} {m}", file=sys.stderr, flush=True)
log("start")
import torch, torch.distributed as dist
log("imported")
dist.init_process_group("gloo")
log("inited")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0:
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False)
    store.add("ready", 1)
    while store.add("ready", 0) < 2:
        time.sleep(0.01)
    log("both ready")
    if dist.get_rank() == 1:
        time.sleep(3600)  # never reaches the all_reduce
    end = time.time() + 2.5  # rank 0 computes for over two sampling periods
    while time.time() < end:
        pass
t = torch.ones(1)
dist.all_reduce(t)
print(f"attempt {attempt} sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
)";

TEST(PythonWorkers, TheWatchdogFindsARankThatNeverReachesTheCollective) {
  const auto script = writeScript(scratch(), "hang.py", kHang);
  // 5 s: more than any quiet spell of a start-up on a loaded machine (both
  // ranks waiting on a slow disk or a retransmitted connect at once).
  const auto r = runDdprun({"--nproc_per_node=2", "--max_restarts=1", "--watchdog_timeout=5",
                            "--log_prefix=", script.string()},
                           kPython, 120s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(linesWith(r.out, "attempt "), (std::vector<std::string>{"1 sum 2", "1 sum 2"}))
      << r.out << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex(R"(Worker rank 1 \(pid \d+\) is hung: no worker of this node made progress )"
                 R"(\(CPU or I/O\) for (\d+\.\d) s)")))
      << r.err;
  // Its stall began at most one sampling period (1 s) before its last
  // sample with progress: found within the timeout + 2 s.
  EXPECT_LT(std::stod(m[1]) + 1.0, 5.0 + 2.0) << r.err;
  EXPECT_NE(r.err.find("worker rank 1: state S (sleeping)"), std::string::npos) << r.err;
  // The rank not blamed: stopped later (in the all_reduce), shown as well.
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(other worker rank 0: last progress \d+\.\d s ago; state S \(sleeping\))")))
      << r.err;
}

// Rank 0 pages a memory-mapped file in from the disk (a dataset read with
// np.memmap, a checkpoint loaded with mmap=True): no descriptor read and
// almost no CPU, only storage reads. Rank 1 waits. That node is busy, not
// hung.
const char kPageIn[] = R"(
import mmap, os, sys, time
if os.environ["RANK"] != "0":
    time.sleep(5)
    sys.exit(0)
def storage_reads():
    with open("/proc/self/io") as f:
        return int(dict(line.split(": ") for line in f.read().splitlines())["read_bytes"])
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
os.fsync(fd)  # written back, so that
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # its pages must come from the disk
before = storage_reads()
data = mmap.mmap(fd, size, prot=mmap.PROT_READ)
end = time.monotonic() + 5
offset = 0
while time.monotonic() < end and offset < size:
    data[offset]  # a page fault that waits for the disk
    offset += 1 << 20
    time.sleep(0.04)
print(f"paged {offset >> 20} MiB in, {(storage_reads() - before) >> 20} MiB from the disk", flush=True)
)";

TEST(PythonWorkers, TheWatchdogCountsPagingInAMemoryMapAsProgress) {
  const auto script = writeScript(scratch(), "page_in.py", kPageIn);
  // On the build tree's disk (a /tmp on tmpfs would never read from a disk).
  const fs::path data =
      fs::path(harness::kBinDir) / ("page-in-" + std::to_string(::getpid()) + ".bin");
  {
    const std::string chunk(1 << 20, 'x');
    std::ofstream out(data, std::ios::binary);
    for (int i = 0; i < 128; ++i)
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  // 2 s: one page fault may wait a while for a busy disk.
  const auto r = runDdprun({"--nproc_per_node=2", "--watchdog_timeout=2",
                            "--log_prefix=", script.string(), data.string()},
                           kPython, 60s);
  fs::remove(data);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("hung"), std::string::npos) << r.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"(paged (\d+) MiB in, (\d+) MiB from the disk)")))
      << r.out << r.err;
  EXPECT_GT(std::stoi(m[2]), 0) << "the file never came from the disk: " << r.out;
}

}  // namespace
}  // namespace ddprun
