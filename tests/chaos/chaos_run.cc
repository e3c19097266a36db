#include "chaos_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include "chaos_process.h"
#include "child_process.h"
#include "etcd_cluster.h"
#include "host_network.h"
#include "slurm_cluster.h"

namespace ddprun::chaos {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using harness::HostNetwork;
using harness::SlurmCluster;
using Clock = std::chrono::steady_clock;

const std::string kDdprun = std::string(DDPRUN_BIN_DIR) + "/ddprun";
const std::string kDaemonBinary = std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous";
const std::string kScript = std::string(DDPRUN_SOURCE_DIR) + "/tests/chaos/chaos_train.py";
const std::string kCppWorker = std::string(DDPRUN_BIN_DIR) + "/chaos-train";
const std::string kCurrentPython = std::string(DDPRUN_VENV_BIN) + "/python";
const std::string kDebianPython = "/usr/bin/python3";
constexpr std::uint16_t kPort = 29400;
constexpr int kSamples = 64;
constexpr char kToken[] = "chaos-secret";

// Where a Slurm node's number goes in a word of its task's command line.
constexpr char kNodeMark[] = "{node}";

// `text` as one single-quoted shell word, kNodeMark as "$SLURM_NODEID".
std::string shellWord(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string mark = kNodeMark;
  for (auto at = quoted.find(mark); at != std::string::npos; at = quoted.find(mark, at)) {
    quoted.replace(at, mark.size(), "'\"$SLURM_NODEID\"'");
  }
  return quoted;
}

// Runs a shell command as root where a host's agent sees the files (its
// mount namespace); its exit code.
using HostShell = std::function<int(const std::string&)>;

// The disk under a host's --log_dir: a small tmpfs mounted for a run with a
// disk-full fault there, filled by the fault (its bytes, then its inodes, as
// a full ext4 disk refuses new directories too), unmounted when the run
// ends. Mounted through `shell`: a Slurm node's mount namespace is its own.
class LogDisk {
 public:
  static constexpr std::size_t kBytes = 2 << 20;
  static constexpr int kInodes = 512;

  LogDisk(fs::path dir, HostShell shell) : dir_(std::move(dir)), shell_(std::move(shell)) {
    // Sticky and writable by all, as /tmp: a Slurm job's agents run as its user.
    const std::string mount = fmt::format(
        "mkdir -p {0} && mount -t tmpfs -o size={1},nr_inodes={2},mode=1777 "
        "chaos-log-disk {0}",
        shellWord(dir_.string()), kBytes, kInodes);
    if (shell_(mount) != 0) throw std::runtime_error("cannot mount a tmpfs: " + mount);
  }
  ~LogDisk() { shell_(fmt::format("umount -l {}", shellWord(dir_.string()))); }
  LogDisk(const LogDisk&) = delete;
  LogDisk& operator=(const LogDisk&) = delete;

  // Writes one file until the disk has no space left, then makes empty
  // ones until it has no inode left.
  void fill() const {
    shell_(fmt::format(
        "cd {} && dd if=/dev/zero of=fill bs=64k 2>/dev/null; seq 0 {} | sed 's/^/fill-/' | "
        "xargs touch 2>/dev/null; true",
        shellWord(dir_.string()), kInodes - 1));
  }
  // A copy of what the disk holds (evidence of a failed run).
  void copyTo(const fs::path& to) const {
    shell_(fmt::format("cp -r {} {}", shellWord(dir_.string()), shellWord(to.string())));
  }

 private:
  fs::path dir_;
  HostShell shell_;
};

struct Timed {
  Clock::time_point at;
  std::function<void()> action;
};

class Run {
 public:
  Run(const Plan& plan, fs::path folder, bool verbose, SlurmCluster* slurm)
      : plan_(plan), folder_(std::move(folder)), verbose_(verbose), slurm_(slurm) {
    if (!slurm_) ownNet_.emplace(HostNetwork::Options{.hosts = kHosts});
  }

  RunResult go();

 private:
  HostNetwork& net() { return slurm_ ? slurm_->network() : *ownNet_; }
  const HostNetwork& net() const { return slurm_ ? slurm_->network() : *ownNet_; }
  // An agent's command line; on a Slurm node (no host), its words hold
  // kNodeMark where the node's number goes.
  std::vector<std::string> agentArgs(std::optional<int> host) const;
  // The workers' variables (chaos_train's), the agents' token.
  std::map<std::string, std::string> jobEnvironment() const;
  void startAgent(int host);
  // Submits the job whose step starts an agent on each of the cluster's
  // nodes, each under `ddprun-chaos --supervise`.
  void startSlurmJob();
  // Whether Slurm has ended the job (checked at most once a second); the
  // agents it ended before their supervisor could tell are killedBySlurm().
  void checkSlurmJob(Clock::time_point now);
  void startDaemon();
  void startEtcd();
  void scan(Process& agent);
  void fire(const Fault& fault);
  // Asks worker `pid` to exit 1 (chaos_train's exit file).
  void askToFail(pid_t pid) const { std::ofstream(folder_ / fmt::format("exit-{}", pid)).put('1'); }
  // The FIFO rank 0 holds at after printing `step` (chaos_train.py), and
  // letting go of it: a regular file from then on.
  fs::path holdAt(int step) const { return folder_ / fmt::format("hold-{}", step); }
  // The file rank 0 creates as it holds at `step`. Not its console line,
  // which a paused agent passes on late: a stale round's "step 10" after
  // the new round's "step 32".
  fs::path heldAt(int step) const { return folder_ / fmt::format("at-{}", step); }
  fs::path logDir(int host) const { return folder_ / fmt::format("logs-host{}", host); }
  // Where a mount reaches host `host`'s agents: a Slurm node's own mount
  // namespace, else this process's (which a host's processes see).
  HostShell hostShell(int host) const;
  void release(int step);
  // Fires the next fault once the job holds at its step, or skips it when
  // its host is gone for good.
  void nextFault(Clock::time_point now);
  // Polls the processes' output and ends until one of them or the next
  // timed action is due.
  void waitForNews(Clock::time_point started) const;
  void after(std::chrono::milliseconds delay, std::function<void()> action) {
    timed_.push_back({Clock::now() + delay, std::move(action)});
  }
  std::optional<pid_t> workerOf(int host, int index) const;
  Process& agentOn(int host) { return *agents_[current_.at(host)]; }
  bool allEnded() const;
  void checkInvariants(RunResult& result);
  // A failed run's evidence in its folder: each agent's output, and a copy
  // of each tmpfs log directory (unmounted when the run ends).
  void keepEvidence() const;
  void killEverything();
  void log(const std::string& line) const {
    if (verbose_) std::cerr << "chaos: " << line << std::endl;
  }

  const Plan& plan_;
  fs::path folder_;
  bool verbose_;
  SlurmCluster* slurm_;                // a Slurm job step's run: its nodes are the hosts
  std::optional<HostNetwork> ownNet_;  // else: hosts of the run's own
  int slurmJob_ = -1;
  Clock::time_point slurmCheckedAt_{};
  std::vector<std::unique_ptr<Process>> agents_;  // every one started, in order
  std::map<int, std::size_t> current_;            // host -> its agent now
  std::unique_ptr<StartedProcess> daemon_;
  std::unique_ptr<harness::EtcdCluster> etcd_;  // etcd jobs: member h on host h
  std::vector<std::unique_ptr<StartedProcess>> oldDaemons_;
  std::vector<Timed> timed_;
  std::map<int, std::unique_ptr<LogDisk>> logDisks_;  // hosts with a disk-full fault
  std::map<int, std::vector<pid_t>> workers_;         // per host, in the order they started
  std::set<pid_t> allWorkers_;
  std::size_t next_ = 0;      // the plan's next fault
  std::vector<Fault> fired_;  // the faults that fired (a skipped one did not)
  std::optional<Clock::time_point> endingFiredAt_;
  std::optional<std::uint64_t> checksum_;
  Clock::time_point lastEnd_{};  // when the last agent to end did
};

HostShell Run::hostShell(int host) const {
  if (slurm_) {
    return [slurm = slurm_, host](const std::string& command) {
      return slurm->runOnNode(host, command).code;
    };
  }
  return [](const std::string& command) {
    harness::ChildProcess shell({"/bin/sh", "-c", command});
    return shell.wait(30s).value_or(-1);
  };
}

std::vector<std::string> Run::agentArgs(std::optional<int> host) const {
  const Job& job = plan_.job;
  std::vector<std::string> argv = {
      slurm_ ? slurm_->jobBinary(kDdprun) : kDdprun,
      fmt::format("--nproc_per_node={}", kWorkersPerHost),
      "--log_prefix=",
      fmt::format("--max_restarts={}", kMaxRestarts),
      "--log_dir=" + (host ? logDir(*host).string() : (folder_ / "logs-host").string() + kNodeMark),
      "--tee=3"};
  if (host) argv.push_back("--local_addr=" + net().address(*host));
  std::string conf =
      "keep_alive_interval=1,keep_alive_max_attempt=3,join_timeout=20,last_call_timeout=1,"
      "close_timeout=5";
  if (job.store == Store::kSlurm) {
    // The short form: the nodes, node rank and store from SLURM_*.
  } else if (job.store == Store::kStatic) {
    argv.insert(argv.end(),
                {"--nnodes=3", fmt::format("--node_rank={}", *host),
                 "--master_addr=" + net().address(0), fmt::format("--master_port={}", kPort)});
  } else if (job.store == Store::kEtcd) {
    argv.insert(argv.end(), {job.elastic ? "--nnodes=2:3" : "--nnodes=3", "--rdzv_backend=etcd",
                             "--rdzv_endpoint=" + etcd_->endpoints(), "--rdzv_id=chaos"});
  } else {
    if (job.store == Store::kAgent) conf += host == 0 ? ",is_host=1" : ",is_host=0";
    if (job.store == Store::kDaemon) conf += ",is_host=0";
    argv.insert(argv.end(), {job.elastic ? "--nnodes=2:3" : "--nnodes=3", "--rdzv_backend=c10d",
                             "--rdzv_endpoint=" + net().endpoint(0, kPort), "--rdzv_id=chaos"});
  }
  argv.push_back("--rdzv_conf=" + conf);
  if (job.watchdog) argv.push_back("--watchdog_timeout=3");
  // A Slurm job's user runs a copy of the script, and binaries it can reach.
  const std::string script = slurm_ ? (folder_ / "chaos_train.py").string() : kScript;
  switch (job.program) {
    case Program::kPython:
      argv.insert(argv.end(), {kCurrentPython, script});
      break;
    case Program::kPython113:
      argv.insert(argv.end(), {kDebianPython, script});
      break;
    case Program::kCpp:
      argv.push_back(slurm_ ? slurm_->jobBinary(kCppWorker) : kCppWorker);
      break;
  }
  return argv;
}

std::map<std::string, std::string> Run::jobEnvironment() const {
  return {{"DDPRUN_TOKEN", kToken},
          {"OMP_NUM_THREADS", "1"},
          {"CHAOS_STEPS", std::to_string(kSteps)},
          {"CHAOS_SAMPLES", std::to_string(kSamples)},
          {"CHAOS_CHECKPOINT", (folder_ / "checkpoint").string()},
          {"CHAOS_DIR", folder_.string()},
          // Where a full log disk's files go instead: in the run's folder.
          {"TMPDIR", (folder_ / "tmp").string()}};
}

void Run::startAgent(int host) {
  const fs::path errorFile = folder_ / fmt::format("error-host{}-{}.json", host, agents_.size());
  auto environment = jobEnvironment();
  environment["TORCHELASTIC_ERROR_FILE"] = errorFile.string();
  auto agent = std::make_unique<StartedProcess>(net().start(host, agentArgs(host), environment));
  agent->host = host;
  agent->errorFile = errorFile;
  current_[host] = agents_.size();
  agents_.push_back(std::move(agent));
  log(fmt::format("agent started on host {}", host));
}

void Run::startSlurmJob() {
  fs::copy_file(kScript, folder_ / "chaos_train.py", fs::copy_options::overwrite_existing);
  if (plan_.job.program == Program::kPython) {
    if (const std::string cannot = slurm_->letUserRunPython(kCurrentPython); !cannot.empty()) {
      throw std::runtime_error(cannot);
    }
  }
  std::string script = "#!/bin/sh\n";
  for (const auto& [name, value] : jobEnvironment()) {
    script += fmt::format("export {}={}\n", name, shellWord(value));
  }
  // One task a node, each an agent under the supervisor: its output, pid
  // and end in agent-host<node>.*; its error file error-host<node>.json.
  std::vector<std::string> task = {slurm_->jobBinary(fs::read_symlink("/proc/self/exe").string()),
                                   "--supervise", (folder_ / "agent-host").string() + kNodeMark,
                                   "--"};
  for (auto& word : agentArgs(std::nullopt)) task.push_back(std::move(word));
  std::string command =
      fmt::format("export TORCHELASTIC_ERROR_FILE={}; exec",
                  shellWord((folder_ / "error-host").string() + kNodeMark + ".json"));
  for (const auto& word : task) command += " " + shellWord(word);
  script += fmt::format("exec srun --ntasks-per-node=1 sh -c {}\n", shellWord(command));
  slurmJob_ = slurm_->submit(script, {fmt::format("-N{}", kHosts), "--time=10"}, folder_);
  for (int h = 0; h < kHosts; ++h) {
    auto agent = std::make_unique<SupervisedProcess>(folder_ / fmt::format("agent-host{}", h));
    agent->host = h;
    agent->errorFile = folder_ / fmt::format("error-host{}.json", h);
    current_[h] = agents_.size();
    agents_.push_back(std::move(agent));
  }
  log(fmt::format("Slurm job {} submitted", slurmJob_));
}

void Run::checkSlurmJob(Clock::time_point now) {
  if (!slurm_ || allEnded() || now - slurmCheckedAt_ < 1s) return;
  slurmCheckedAt_ = now;
  const std::string state = slurm_->jobState(slurmJob_);
  if (state == "PENDING" || state == "CONFIGURING" || state == "RUNNING" || state == "COMPLETING") {
    return;
  }
  for (const auto& agent : agents_) {
    if (agent->poll()) lastEnd_ = now;
    if (!agent->ended) {
      static_cast<SupervisedProcess&>(*agent).killedBySlurm();
      lastEnd_ = now;
      log(fmt::format("agent on host {} ended with the Slurm job ({})", agent->host, state));
    }
  }
}

void Run::startDaemon() {
  if (daemon_) oldDaemons_.push_back(std::move(daemon_));
  daemon_ = std::make_unique<StartedProcess>(
      net().start(0, {kDaemonBinary, "--host", "0.0.0.0", "--port", std::to_string(kPort)},
                  {{"DDPRUN_TOKEN", kToken}}));
}

void Run::startEtcd() {
  harness::EtcdHosts hosts;
  for (int h = 0; h < kHosts; ++h) hosts.addresses.push_back(net().address(h));
  hosts.inHost = [this](int h, std::vector<std::string> argv) { return net().inHost(h, argv); };
  etcd_ =
      std::make_unique<harness::EtcdCluster>(kHosts, std::nullopt, harness::EtcdTiming{}, hosts);
}

// Worker lines: "start rank R world W pid P ...", "checksum X" (and "step
// N world W", which only the verbose log shows).
void Run::scan(Process& agent) {
  static const std::regex start(R"(^start rank \d+ world \d+ pid (\d+))");
  static const std::regex checksum(R"(^checksum (\d+))");
  for (;;) {
    const auto end = agent.out.find('\n', agent.scanned);
    if (end == std::string::npos) return;
    const std::string line = agent.out.substr(agent.scanned, end - agent.scanned);
    agent.scanned = end + 1;
    if (verbose_) std::cerr << "host " << agent.host << ": " << line << "\n";
    std::smatch m;
    if (std::regex_search(line, m, start)) {
      const pid_t pid = std::stoi(m[1]);
      workers_[agent.host].push_back(pid);
      allWorkers_.insert(pid);
    } else if (std::regex_search(line, m, checksum)) {
      checksum_ = std::stoull(m[1]);
    }
  }
}

std::optional<pid_t> Run::workerOf(int host, int index) const {
  const auto it = workers_.find(host);
  if (it == workers_.end() || it->second.empty()) return std::nullopt;
  const auto& pids = it->second;
  const std::size_t latest = pids.size() >= kWorkersPerHost ? pids.size() - kWorkersPerHost : 0;
  return pids[std::min(pids.size() - 1, latest + static_cast<std::size_t>(index))];
}

void Run::fire(const Fault& f) {
  log(fmt::format("fault: {} on host {}", kindName(f.kind), f.host));
  const auto worker = workerOf(f.host, f.worker);
  switch (f.kind) {
    case FaultKind::kWorkerKill:
      if (worker) ::kill(*worker, SIGKILL);
      break;
    case FaultKind::kWorkerExit:
      if (worker) askToFail(*worker);
      break;
    case FaultKind::kEtcdMemberKill:
      etcd_->kill(f.host);
      break;
    case FaultKind::kDiskFull:
      logDisks_.at(f.host)->fill();
      if (worker) askToFail(*worker);
      break;
    case FaultKind::kWorkerPause:
      if (worker) {
        ::kill(*worker, SIGSTOP);
        after(1000ms, [pid = *worker] { ::kill(pid, SIGCONT); });
      }
      break;
    case FaultKind::kWorkerStop:
      if (worker) ::kill(*worker, SIGSTOP);
      break;
    case FaultKind::kAgentKillRestart:
      agentOn(f.host).restartWhenEnded = true;
      agentOn(f.host).signal(SIGKILL);
      break;
    case FaultKind::kAgentPauseShort:
    case FaultKind::kAgentPauseLong: {
      Process& agent = agentOn(f.host);
      agent.signal(SIGSTOP);
      after(f.kind == FaultKind::kAgentPauseShort ? 500ms : 6000ms,
            [&agent] { agent.signal(SIGCONT); });
      break;
    }
    case FaultKind::kAgentTerm:
      agentOn(f.host).signal(SIGTERM);
      break;
    case FaultKind::kStoreHostKill:
      agentOn(f.host).signal(SIGKILL);
      break;
    case FaultKind::kPartitionHeal:
      net().cut(f.host);
      after(500ms, [this, host = f.host] { net().restore(host); });
      break;
    case FaultKind::kPartitionCut:
      net().cut(f.host);
      break;
    case FaultKind::kDaemonKillRestart:
      if (daemon_) {
        daemon_->signal(SIGKILL);
        after(500ms, [this] { startDaemon(); });
      }
      break;
    case FaultKind::kCount:
      break;
  }
}

void Run::release(int step) {
  const fs::path hold = holdAt(step);
  // Opening a FIFO read-write never blocks and lets a reader's open go on;
  // the regular file put in its place lets every later pass go straight on;
  // closing gives the reader its end of file.
  const int fd = ::open(hold.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  const fs::path file = hold.string() + ".open";
  std::ofstream(file).close();
  fs::rename(file, hold);
  if (fd >= 0) ::close(fd);
}

void Run::nextFault(Clock::time_point now) {
  if (next_ >= plan_.faults.size() || !timed_.empty()) return;
  const Fault& f = plan_.faults[next_];
  const Process& target = agentOn(f.host);
  if (target.ended && !target.restartWhenEnded) {
    log(fmt::format("fault skipped: {} on host {}, which is gone", kindName(f.kind), f.host));
  } else if (fs::exists(heldAt(f.atStep))) {
    fire(f);
    fired_.push_back(f);
    Plan judged = plan_;
    judged.faults = fired_;
    classify(judged);
    if (!judged.survivable && !endingFiredAt_) endingFiredAt_ = now;
  } else {
    return;
  }
  release(f.atStep);
  ++next_;
}

void Run::waitForNews(Clock::time_point started) const {
  std::vector<pollfd> fds;
  for (const auto& agent : agents_) agent->watch(fds);
  if (daemon_) daemon_->watch(fds);
  auto until = started + kRunLimit;
  for (const auto& t : timed_) until = std::min(until, t.at);
  // A fault waits for its file (heldAt), and a Slurm job's agents write
  // files: neither wakes a poll, so look again soon.
  if (next_ < plan_.faults.size() || slurm_) until = std::min(until, Clock::now() + 50ms);
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
  ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, wait.count())));
}

bool Run::allEnded() const {
  for (const auto& [host, index] : current_) {
    const Process& agent = *agents_[index];
    if (!agent.ended || agent.restartWhenEnded) return false;
  }
  return true;
}

void Run::killEverything() {
  for (auto& agent : agents_) {
    if (!agent->ended) {
      agent->signal(SIGCONT);
      agent->signal(SIGKILL);
    }
  }
  if (slurm_) {
    slurm_->cancel(slurmJob_);  // its nodes' daemons stay: the next run's
  } else {
    for (int h = 0; h < kHosts; ++h) net().crash(h);
  }
}

RunResult Run::go() {
  RunResult result;
  const auto started = Clock::now();
  fs::create_directories(folder_ / "tmp");
  if (slurm_) {
    // The job's workers run as the cluster's user: they write here.
    for (const auto& dir : {folder_, folder_ / "tmp"}) fs::permissions(dir, fs::perms::all);
  }
  for (const Fault& f : plan_.faults) {
    ::mkfifo(holdAt(f.atStep).c_str(), 0600);
    if (slurm_)
      fs::permissions(holdAt(f.atStep), fs::perms::owner_read | fs::perms::owner_write |
                                            fs::perms::group_read | fs::perms::others_read);
    if (f.kind == FaultKind::kDiskFull && !logDisks_.contains(f.host)) {
      logDisks_[f.host] = std::make_unique<LogDisk>(logDir(f.host), hostShell(f.host));
    }
  }
  if (plan_.job.store == Store::kDaemon) startDaemon();
  if (plan_.job.store == Store::kEtcd) startEtcd();
  if (slurm_) {
    startSlurmJob();
  } else {
    for (int h = 0; h < kHosts; ++h) startAgent(h);
  }
  bool timedOut = false;
  while (true) {
    const auto now = Clock::now();
    for (auto& agent : agents_) {
      if (agent->poll()) {
        lastEnd_ = now;
        log(fmt::format("agent on host {} ended: {}", agent->host, agent->code));
      }
      scan(*agent);
    }
    if (daemon_) daemon_->poll();
    for (std::size_t i = 0; i < timed_.size();) {
      if (timed_[i].at <= now) {
        auto action = std::move(timed_[i].action);
        timed_.erase(timed_.begin() + static_cast<std::ptrdiff_t>(i));
        action();
      } else {
        ++i;
      }
    }
    for (int h = 0; h < kHosts; ++h) {
      Process& agent = agentOn(h);
      if (agent.ended && agent.restartWhenEnded) {
        agent.restartWhenEnded = false;
        startAgent(h);  // as a scheduler would
      }
    }
    nextFault(now);
    checkSlurmJob(now);
    if (allEnded() && timed_.empty()) break;
    if (now - started > kRunLimit) {
      timedOut = true;
      break;
    }
    waitForNews(started);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  for (const auto& agent : agents_)
    log(fmt::format("host {} stderr:\n{}", agent->host, agent->err));
  if (timedOut) {
    result.violations.push_back(fmt::format("the job did not end within {} s", kRunLimit.count()));
    killEverything();
  }
  if (slurm_) {
    // A cut node's step must end too; the next run needs every node.
    for (int h = 0; h < kHosts; ++h) net().restore(h);
    const auto job = slurm_->waitForJob(slurmJob_, 60s);
    if (!job.finished) {
      result.violations.push_back(fmt::format(
          "Slurm job {} was still {} 60 s after its agents ended", slurmJob_, job.state));
    }
  }
  checkInvariants(result);
  if (!result.violations.empty()) keepEvidence();
  return result;
}

void Run::keepEvidence() const {
  for (std::size_t i = 0; i < agents_.size(); ++i) {
    const Process& agent = *agents_[i];
    const std::string stem = fmt::format("agent-host{}-{}", agent.host, i);
    std::ofstream(folder_ / (stem + ".out")) << agent.out;
    std::ofstream(folder_ / (stem + ".err")) << agent.err;
  }
  for (const auto& [host, disk] : logDisks_) {
    disk->copyTo(folder_ / fmt::format("logs-host{}-copy", host));
  }
}

void Run::checkInvariants(RunResult& result) {
  auto& violations = result.violations;
  // A fault that did not fire (the job ended first) is no part of the verdict.
  Plan judged = plan_;
  judged.faults = fired_;
  classify(judged);
  std::vector<int> codes;
  for (const auto& [host, index] : current_) codes.push_back(agents_[index]->code);
  result.outcome = fmt::format("{} (exit codes {})", judged.survivable ? "completes" : "ends",
                               fmt::join(codes, " "));
  for (const auto& agent : agents_) {
    if (agent->death != 0 && !agent->signalsSent.contains(agent->death)) {
      violations.push_back(fmt::format("ddprun on host {} died of signal {} that nobody sent it",
                                       agent->host, agent->death));
    }
  }
  for (auto* daemon : {daemon_.get()}) {
    if (daemon != nullptr && daemon->ended && daemon->death != 0 &&
        !daemon->signalsSent.contains(daemon->death)) {
      violations.push_back(
          fmt::format("ddprun-rendezvous died of signal {} that nobody sent it", daemon->death));
    }
  }
  const std::uint64_t expected = undisturbedChecksum(kSteps, kSamples);
  const bool allZero = std::all_of(codes.begin(), codes.end(), [](int c) { return c == 0; });
  if (!judged.survivable && allZero && checksum_ == expected) {
    // The job finished before the fault could end it (its workers trained
    // to the end within the keep-alive bound of a paused agent): right.
    result.outcome = "completes before the fault could end it (exit codes 0 0 0)";
  } else if (judged.survivable) {
    if (!checksum_) {
      violations.push_back("the job printed no checksum: it did not complete");
    } else if (*checksum_ != expected) {
      violations.push_back(
          fmt::format("checksum {} is not the undisturbed {}", *checksum_, expected));
    }
    for (const auto& [host, index] : current_) {
      const Process& agent = *agents_[index];
      if (agent.code != 0 && !judged.mayDrop.contains(host)) {
        violations.push_back(
            fmt::format("ddprun on host {} exited {} in a job that survives", host, agent.code));
      }
    }
  } else {
    if (allZero) {
      violations.push_back(
          "every node exited 0 after a fault the job cannot survive, without "
          "the undisturbed checksum");
    }
    if (endingFiredAt_ && lastEnd_ - *endingFiredAt_ > kEndBound) {
      violations.push_back(
          fmt::format("the job took {:.1f} s to end after {}, over the bound of {} s",
                      std::chrono::duration<double>(lastEnd_ - *endingFiredAt_).count(),
                      kindName(judged.faults[judged.endingFault].kind), kEndBound.count()));
    }
    for (const auto& [host, index] : current_) {
      const Process& agent = *agents_[index];
      if (agent.code == 0 || !agent.signalsSent.empty()) continue;
      const bool says = agent.err.find("ddprun: error") != std::string::npos ||
                        agent.err.find("FAILED") != std::string::npos;
      if (!says) {
        violations.push_back(fmt::format("ddprun on host {} exited {} without saying why on stderr",
                                         host, agent.code));
      }
      std::ifstream file(agent.errorFile);
      std::stringstream content;
      content << file.rdbuf();
      if (content.str().find("\"message\"") == std::string::npos) {
        violations.push_back(fmt::format("ddprun on host {} exited {} without an error file ({})",
                                         host, agent.code, agent.errorFile.string()));
      }
    }
  }
  // Nothing left running: the daemon and etcd are stopped first (the
  // harness's own).
  if (daemon_ && !daemon_->ended) {
    daemon_->signal(SIGTERM);
    daemon_->waitEnd(10s);
  }
  etcd_.reset();
  for (pid_t pid : stillRunningAfter(allWorkers_, 10s)) {
    violations.push_back(fmt::format("worker pid {} outlived its job", pid));
  }
  if (slurm_) {
    // Slurm's daemons stay; no process of the job's user may.
    for (const auto deadline = Clock::now() + 10s; Clock::now() < deadline;) {
      if (slurm_->userProcesses().empty()) break;
      std::this_thread::sleep_for(100ms);
    }
    if (const auto left = slurm_->userProcesses(); !left.empty()) {
      violations.push_back(
          fmt::format("the job's processes {} outlived it", fmt::join(left, ", ")));
    }
    return;
  }
  for (int h = 0; h < kHosts; ++h) {
    const auto left = net().processesIn(h);
    if (!left.empty()) {
      violations.push_back(
          fmt::format("host {} still runs processes {} after the job", h, fmt::join(left, ", ")));
    }
  }
}

}  // namespace

RunResult runPlan(const Plan& plan, const fs::path& folder, bool verbose,
                  harness::SlurmCluster* slurm) {
  Run run(plan, folder, verbose, slurm);
  return run.go();
}

}  // namespace ddprun::chaos
