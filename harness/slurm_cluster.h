// SlurmCluster: a real Slurm cluster (Debian's slurmctld, slurmd,
// slurm-client and munge, installed by scripts/setup) on this one machine,
// for tests that submit ddprun jobs with sbatch.
//
//   SlurmCluster cluster({.nodes = 3});
//   const auto job = cluster.submit("#!/bin/sh\nsrun hostname\n", {"-N2"});
//   const auto result = cluster.waitForJob(job, std::chrono::minutes(2));
//   // result.state == "COMPLETED", result.exitCode, result.output
//
// Every node is a host of a HostNetwork (harness/host_network.h):
// node h is `node<h+1>` at 10.10.0.(h+1). slurmctld and munged live on one
// more host of it, `slurmctl`. Each daemon runs in its host's network
// namespace (entered with nsenter, not `ip netns exec`, which remounts /sys
// and hides /sys/fs/cgroup from slurmd) and in new UTS and mount namespaces
// of its own: the host name is the node's, and a generated hosts file and
// slurm.conf are bind-mounted over /etc/hosts and /etc/slurm there. The
// machine's files are never touched, and every job process, forked from a
// slurmd, sees the node's name, names and configuration. Client commands
// (sbatch, scontrol, ...) run inside slurmctl's namespaces. One munged (own
// key, own socket, AuthInfo=socket=...) serves every daemon; a munged or
// slurmd that apt may have started is neither used nor disturbed (other
// namespace, other socket, other files). Process tracking is
// proctrack/linuxproc: proctrack/cgroup needs a cgroup tree per slurmd, which
// several slurmd on one kernel do not have (docs/development.md). Jobs are
// submitted by an unprivileged user, kUser, created once (useradd) and kept.
//
// Cleanup: the destructor cancels the jobs, kills every process in the
// cluster's namespaces (daemons, job steps, workers, whatever they left) and
// deletes the namespaces and the state folder. A test process killed with
// SIGKILL leaves namespaces and a state folder behind: the next SlurmCluster
// removes both (HostNetwork deletes the namespaces and kills what is in them).
// Ports: slurmctld (6817) and every slurmd (6818) listen inside their own
// network namespaces, so they collide with nothing, a parallel cluster
// included.
//
// Requires root, HostNetwork's requirements, the Slurm and munge packages,
// util-linux (nsenter, unshare, runuser) and useradd: unavailable() says what
// is missing, for the tests' skip line.
//
// Thread-safety: none; one test thread drives it.
#pragma once

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "host_network.h"

namespace ddprun::harness {

class SlurmCluster {
 public:
  struct Options {
    int nodes = 3;  // 1 to 8 (HostNetwork's 9 hosts, one of them slurmctl)
  };

  // The unprivileged user that submits every job.
  inline static const std::string kUser = "ddprun-slurm";

  // What a finished (or, after a timeout, a still running) job looks like.
  struct JobResult {
    bool finished = false;  // a terminal state was reached in time
    std::string state;      // COMPLETED, FAILED, CANCELLED, TIMEOUT, ... (last seen)
    int exitCode = -1;      // ExitCode=code:signal
    int signal = -1;
    std::string output;  // the job's output file
    std::string record;  // `scontrol show job -o` as last seen, for messages
  };

  // A shell command's exit code and output (stdout and stderr together).
  struct Result {
    int code = -1;
    std::string output;
  };

  // Why a cluster cannot be made on this machine, or nullopt when it can.
  static std::optional<std::string> unavailable() {
    if (auto why = HostNetwork::unavailable()) return why;
    for (const char* program : {"slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel",
                                "srun", "munged", "munge"}) {
      if (findProgram(program).empty()) {
        return fmt::format("`{}` is missing (scripts/setup installs the Slurm packages)", program);
      }
    }
    for (const char* program : {"nsenter", "unshare", "runuser", "useradd", "mount", "hostname"}) {
      if (findProgram(program).empty()) return fmt::format("`{}` is missing", program);
    }
    if (!std::filesystem::is_directory("/etc/slurm")) {
      return "/etc/slurm is missing (the Slurm packages make it; the cluster mounts its "
             "configuration over it)";
    }
    return std::nullopt;
  }

  SlurmCluster() : SlurmCluster(Options{}) {}
  explicit SlurmCluster(Options options)
      : options_(options),
        state_(std::filesystem::temp_directory_path() /
               fmt::format("ddprun-slurm-{}-{}", ::getpid(), nextId()++)) {
    if (options_.nodes < 1 || options_.nodes > 8) throw std::invalid_argument("1 to 8 nodes");
    removeStaleStateFolders();
    ensureUser();
    net_ = std::make_unique<HostNetwork>(
        HostNetwork::Options{.hosts = options_.nodes + 1, .ipv4 = true, .ipv6 = false});
    try {
      writeFiles();
      startDaemons();
    } catch (const std::exception& e) {
      const std::string logs = logTails();
      stopEverything();
      throw std::runtime_error(
          fmt::format("the Slurm cluster did not start: {}\n{}(state kept in {})", e.what(), logs,
                      state_.string()));
    }
  }

  ~SlurmCluster() {
    stopEverything();
    std::error_code ignored;
    std::filesystem::remove_all(state_, ignored);
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  int nodes() const { return options_.nodes; }
  // node<h+1>: the name of host h, as Slurm, /etc/hosts and hostname know it.
  static std::string nodeName(int host) { return fmt::format("node{}", host + 1); }
  std::string nodeAddress(int host) const { return net_->ipv4(host); }
  HostNetwork& network() { return *net_; }
  const std::filesystem::path& stateFolder() const { return state_; }
  uid_t userId() const { return uid_; }

  // A folder for a job's script, output and files, everyone may write
  // (created; `name` empty: the root of all job folders).
  std::filesystem::path jobFolder(const std::string& name = "") const {
    const auto dir = name.empty() ? state_ / "jobs" : state_ / "jobs" / name;
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::all);
    return dir;
  }

  // `path` where kUser can run it: the path itself when kUser can reach and
  // execute it, else a copy in the job folders' bin/ (the checkout may sit
  // under a folder other users cannot enter).
  std::string jobBinary(const std::string& path) const {
    if (runAs(fmt::format("test -x {}", quote(path))).code == 0) return path;
    const auto bin = jobFolder("bin");
    const auto copy = bin / std::filesystem::path(path).filename();
    std::filesystem::copy_file(path, copy, std::filesystem::copy_options::update_existing);
    std::filesystem::permissions(
        copy, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                  std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                  std::filesystem::perms::others_exec);
    if (runAs(fmt::format("test -x {}", quote(copy.string()))).code != 0) {
      throw std::runtime_error(
          fmt::format("{} cannot run {} nor its copy {}", kUser, path, copy.string()));
    }
    return copy.string();
  }

  // Writes `script` into `folder` (a jobFolder(); empty: jobFolder("job-N"))
  // and submits it as kUser with `sbatch --parsable --chdir=FOLDER
  // --output=FOLDER/slurm-%j.out OPTIONS`; the job id.
  int submit(const std::string& script, const std::vector<std::string>& sbatchOptions = {},
             std::filesystem::path folder = {}) {
    const int n = submitted_++;
    if (folder.empty()) folder = jobFolder(fmt::format("job-{}", n));
    const auto file = folder / fmt::format("script-{}.sh", n);
    std::ofstream(file) << script;
    std::filesystem::permissions(file, std::filesystem::perms::all);
    std::string command =
        fmt::format("sbatch --parsable --chdir={0} --output={0}/slurm-%j.out", quote(folder));
    for (const auto& option : sbatchOptions) command += " " + quote(option);
    command += " " + quote(file.string());
    const Result result = client(fmt::format("runuser -l {} -c {}", kUser, quote(command)));
    std::smatch m;
    if (result.code != 0 || !std::regex_search(result.output, m, std::regex(R"((\d+)\s*$)"))) {
      throw std::runtime_error(fmt::format("sbatch failed ({}): {}", result.code, result.output));
    }
    return std::stoi(m[1]);
  }

  // Waits (polling scontrol) until job `id` reaches a terminal state or
  // `timeout` passes; its state, exit code and output.
  JobResult waitForJob(int id, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    JobResult result;
    for (;;) {
      result.record = client(fmt::format("scontrol show job -o {}", id)).output;
      result.state = field(result.record, "JobState");
      if (isTerminal(result.state)) {
        result.finished = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::smatch m;
    const std::string exit = field(result.record, "ExitCode");
    if (std::regex_match(exit, m, std::regex(R"((\d+):(\d+))"))) {
      result.exitCode = std::stoi(m[1]);
      result.signal = std::stoi(m[2]);
    }
    if (const std::string out = field(result.record, "StdOut"); !out.empty()) {
      std::ifstream file(out);
      result.output.assign(std::istreambuf_iterator<char>(file), {});
    }
    return result;
  }

  // The job's state now ("" when Slurm does not know the job).
  std::string jobState(int id) const {
    return field(client(fmt::format("scontrol show job -o {}", id)).output, "JobState");
  }

  // scancel as kUser: the job ends (CANCELLED) ...
  Result cancel(int id) const { return clientAs(fmt::format("scancel {}", id)); }
  // ... or only gets signal `sig` (every process of every step).
  Result signal(int id, int sig) const {
    return clientAs(fmt::format("scancel --signal={} {}", sig, id));
  }

  // Runs `shellCommand` as root inside node `host` (its network, UTS and
  // mount namespaces: its name, its /etc/hosts).
  Result runOnNode(int host, const std::string& shellCommand) const {
    return run({findProgram("nsenter"), "--target", std::to_string(slurmd_.at(host)->pid()),
                "--net", "--uts", "--mount", "--", "/bin/sh", "-c", shellCommand});
  }
  // Runs `shellCommand` as root where the client commands run (slurmctl).
  Result client(const std::string& shellCommand) const {
    return run({findProgram("nsenter"), "--target", std::to_string(slurmctld_->pid()), "--net",
                "--uts", "--mount", "--", "/bin/sh", "-c", shellCommand});
  }
  // ... and as kUser, with a login environment.
  Result clientAs(const std::string& shellCommand) const {
    return client(fmt::format("runuser -l {} -c {}", kUser, quote(shellCommand)));
  }

  // Makes `python` runnable by kUser, with torch importable, on every node;
  // "" when it is, else why not. The project's environment is a venv whose
  // interpreter may lie under a folder other users cannot enter (pyenv's
  // /root/.pyenv/versions/..., /root being 0700): then, on each node and
  // only inside that node's mount namespace (the machine's folders keep
  // their modes, as the cluster's /etc/hosts), the first such folder is
  // covered with a tmpfs everyone may enter, holding only the entry on the
  // way to the interpreter, bound from the real one. Done once per python.
  std::string letUserRunPython(const std::string& python) {
    if (pythonsReady_.contains(python)) return "";
    const std::string user = kUser;
    // Finds torch without importing it (an import costs seconds).
    const std::string check = fmt::format(
        "runuser -u {} -- {} -c 'import importlib.util as u; assert u.find_spec(\"torch\")'", user,
        quote(python));
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(python, ec);
    if (ec) return fmt::format("{}: {}", python, ec.message());
    for (int host = 0; host < nodes(); ++host) {
      if (runOnNode(host, check).code == 0) continue;
      // The first folder on the way to the interpreter kUser cannot enter.
      std::filesystem::path blocked;
      std::filesystem::path next;
      std::filesystem::path walked = "/";
      for (const auto& part : real.parent_path().relative_path()) {
        const std::filesystem::path path = walked / part;
        if (!blocked.empty()) {
          next = path;
          break;
        }
        const auto enter =
            runOnNode(host, fmt::format("runuser -u {} -- test -x {}", user, quote(path.string())));
        if (enter.code != 0) blocked = path;
        walked = path;
      }
      if (blocked.empty() || next.empty()) {
        return fmt::format("{} cannot run {} on {}: {}", user, python, nodeName(host),
                           runOnNode(host, check).output);
      }
      const std::filesystem::path stage = state_ / fmt::format("python-stage-{}", host);
      std::filesystem::create_directories(stage);
      const auto mounted = runOnNode(
          host, fmt::format("set -e; mount --bind {0} {1}; mount -t tmpfs -o mode=0755 "
                            "ddprun-slurm-test {2}; mkdir {0}; mount --move {1} {0}",
                            quote(next.string()), quote(stage.string()), quote(blocked.string())));
      const auto checked = runOnNode(host, check);
      if (mounted.code != 0 || checked.code != 0) {
        return fmt::format("{} cannot enter {} on {}, and covering it failed: {}{}", user,
                           blocked.string(), nodeName(host), mounted.output, checked.output);
      }
      std::clog << fmt::format("[ cluster  ] {}: {} covered for {} to reach {}\n", nodeName(host),
                               blocked.string(), user, next.string());
    }
    pythonsReady_.insert(python);
    return "";
  }
  // The pids of kUser's processes inside the cluster's namespaces (every
  // job process; none once the jobs are over).
  std::vector<pid_t> userProcesses() const {
    std::vector<pid_t> pids;
    for (const pid_t pid : processesInNamespaces()) {
      if (processUid(pid) == std::optional<uid_t>(uid_)) pids.push_back(pid);
    }
    return pids;
  }

  // Cancels every job and waits (bounded) until every node is idle again
  // with no job process left: a clean slate for the next test.
  bool cancelAllAndWaitIdle(std::chrono::milliseconds timeout) const {
    client(fmt::format("scancel --user={}", kUser));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (idleNodes() == options_.nodes && userProcesses().empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // The nodes that sinfo reports idle.
  int idleNodes() const {
    std::istringstream lines(client("sinfo -h -N -o '%N %T'").output);
    std::set<std::string> idle;
    for (std::string node, state; lines >> node >> state;) {
      if (state == "idle") idle.insert(node);
    }
    return static_cast<int>(idle.size());
  }

  // The last lines of the daemons' logs, for failure messages.
  std::string logTails(std::size_t bytes = 3000) const {
    std::string text;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(state_ / "log", ec)) {
      std::ifstream file(entry.path());
      std::string content((std::istreambuf_iterator<char>(file)), {});
      if (content.size() > bytes) content = "..." + content.substr(content.size() - bytes);
      text += fmt::format("--- {}\n{}\n", entry.path().string(), content);
    }
    return text;
  }

 private:
  static std::atomic<int>& nextId() {
    static std::atomic<int> id{0};
    return id;
  }

  static std::string findProgram(const std::string& name) {
    for (const char* dir :
         {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
      const std::string path = std::string(dir) + "/" + name;
      if (::access(path.c_str(), X_OK) == 0) return path;
    }
    return "";
  }

  // `text` as one single-quoted shell word.
  static std::string quote(const std::string& text) {
    std::string quoted = "'";
    for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
  }
  static std::string quote(const std::filesystem::path& path) { return quote(path.string()); }

  // Runs `argv` to completion (60 s at most), reading its output meanwhile.
  static Result run(const std::vector<std::string>& argv) {
    std::vector<std::string> withStderr = {"/bin/sh", "-c", "exec \"$@\" 2>&1", "sh"};
    withStderr.insert(withStderr.end(), argv.begin(), argv.end());
    ChildProcess process(withStderr);
    Result result;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      result.output += process.drainStdout();
      if (auto code = process.wait(std::chrono::milliseconds(0))) {
        result.code = *code;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        result.output += "\n(killed after 60 s)";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    result.output += process.stdoutText();
    return result;
  }
  static Result runShell(const std::string& shellCommand) {
    return run({"/bin/sh", "-c", shellCommand});
  }
  // Runs `shellCommand` as kUser (in this namespace; for access checks).
  static Result runAs(const std::string& shellCommand) {
    return run({findProgram("runuser"), "-u", kUser, "--", "/bin/sh", "-c", shellCommand});
  }

  static std::string field(const std::string& record, const std::string& name) {
    std::smatch m;
    if (!std::regex_search(record, m, std::regex("(^|\\s)" + name + "=(\\S*)"))) return "";
    return m[2];
  }

  static bool isTerminal(const std::string& state) {
    static const std::set<std::string> terminal = {"COMPLETED", "FAILED",        "CANCELLED",
                                                   "TIMEOUT",   "NODE_FAIL",     "PREEMPTED",
                                                   "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE"};
    return terminal.contains(state);
  }

  // Creates kUser once (kept between runs: a system user, its home under
  // /var/lib). Several test processes may race here: useradd locks
  // /etc/passwd, the loser finds the user made.
  void ensureUser() {
    if (::getpwnam(kUser.c_str()) == nullptr) {
      runShell(
          fmt::format("{} --system --user-group --create-home --home-dir /var/lib/{} "
                      "--shell /bin/sh {}",
                      findProgram("useradd"), kUser, kUser));
    }
    const passwd* entry = ::getpwnam(kUser.c_str());
    if (entry == nullptr) throw std::runtime_error("could not create the user " + kUser);
    uid_ = entry->pw_uid;
  }

  // State folders of test processes that no longer exist (killed mid-test).
  static void removeStaleStateFolders() {
    const std::regex ours(R"(^ddprun-slurm-(\d+)-\d+$)");
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
      std::smatch m;
      const std::string name = entry.path().filename().string();
      if (!std::regex_match(name, m, ours)) continue;
      if (processLives(std::stoi(m[1]))) continue;
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

  int controllerHost() const { return options_.nodes; }

  void writeFiles() {
    namespace fs = std::filesystem;
    fs::remove_all(state_);
    for (const char* dir : {"etc", "munge", "log", "spool", "ctld"}) {
      fs::create_directories(state_ / dir);
    }
    fs::permissions(state_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
    const auto jobs = jobFolder();
    if (runAs(fmt::format("test -w {} && test -x {}", quote(jobs), quote(jobs))).code != 0) {
      throw std::runtime_error(
          fmt::format("{} cannot write into {} (set TMPDIR to a folder "
                      "everyone can enter)",
                      kUser, jobs.string()));
    }

    std::string hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n";
    for (int h = 0; h < options_.nodes; ++h) {
      hosts += fmt::format("{} {}\n", net_->ipv4(h), nodeName(h));
    }
    hosts += fmt::format("{} slurmctl\n", net_->ipv4(controllerHost()));
    std::ofstream(state_ / "etc" / "hosts") << hosts;

    // munged refuses a key others can read.
    std::random_device random;
    std::string key;
    for (int i = 0; i < 1024; ++i) key += static_cast<char>(random() & 0xff);
    const auto keyFile = state_ / "munge" / "munge.key";
    std::ofstream(keyFile, std::ios::binary) << key;
    fs::permissions(keyFile, fs::perms::owner_read);

    const std::string state = state_.string();
    const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    std::string conf = fmt::format(
        "# Generated by harness/slurm_cluster.h\n"
        "ClusterName=ddprun-test\n"
        "SlurmctldHost=slurmctl({ctl})\n"
        "SlurmctldPort=6817\n"
        "SlurmdPort=6818\n"
        "SlurmUser=root\n"
        "SlurmdUser=root\n"
        "AuthType=auth/munge\n"
        "AuthInfo=socket={state}/munge/munge.socket\n"
        "ProctrackType=proctrack/linuxproc\n"
        "TaskPlugin=task/none\n"
        "MpiDefault=none\n"
        "JobAcctGatherType=jobacct_gather/none\n"
        "AccountingStorageType=accounting_storage/none\n"
        "JobCompType=jobcomp/none\n"
        "SchedulerType=sched/backfill\n"
        "SelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\n"
        "SlurmdParameters=config_overrides\n"
        "ReturnToService=2\n"
        "JobRequeue=1\n"
        "MinJobAge=600\n"
        "KillWait=30\n"
        "MailProg=/bin/true\n"
        "StateSaveLocation={state}/ctld\n"
        "SlurmctldPidFile={state}/ctld/slurmctld.pid\n"
        "SlurmctldLogFile={state}/log/slurmctld.log\n"
        "SlurmdSpoolDir={state}/spool/%n\n"
        "SlurmdPidFile={state}/spool/%n.pid\n"
        "SlurmdLogFile={state}/log/slurmd-%n.log\n",
        fmt::arg("ctl", net_->ipv4(controllerHost())), fmt::arg("state", state));
    for (int h = 0; h < options_.nodes; ++h) {
      conf += fmt::format("NodeName={} NodeAddr={} CPUs={} State=UNKNOWN\n", nodeName(h),
                          net_->ipv4(h), cpus);
    }
    conf += "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    std::ofstream(state_ / "etc" / "slurm.conf") << conf;
  }

  // `argv` inside host `host`: its network namespace, new UTS and mount
  // namespaces with `name` as host name and our /etc/hosts and /etc/slurm;
  // output appended to log/<log>. The daemon keeps the returned pid (every
  // step execs the next).
  std::unique_ptr<ChildProcess> startDaemon(int host, const std::string& name,
                                            const std::string& log,
                                            std::vector<std::string> argv) const {
    static const char* kScript =
        "hostname \"$1\" && mount --bind \"$2\" /etc/hosts && mount --bind \"$3\" /etc/slurm && "
        "log=$4 && shift 4 && exec \"$@\" >>\"$log\" 2>&1 </dev/null";
    std::vector<std::string> wrapped = {findProgram("nsenter"),
                                        "--net=/run/netns/" + net_->namespaceName(host),
                                        "--",
                                        findProgram("unshare"),
                                        "--uts",
                                        "--mount",
                                        "--",
                                        "/bin/sh",
                                        "-c",
                                        kScript,
                                        "sh",
                                        name,
                                        (state_ / "etc" / "hosts").string(),
                                        (state_ / "etc").string(),
                                        (state_ / "log" / log).string()};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return std::make_unique<ChildProcess>(wrapped);
  }

  void startDaemons() {
    const std::string munge = (state_ / "munge").string();
    munged_ = startDaemon(
        controllerHost(), "slurmctl", "munged.out",
        {findProgram("munged"), "--foreground", "--socket=" + munge + "/munge.socket",
         "--key-file=" + munge + "/munge.key", "--pid-file=" + munge + "/munged.pid",
         "--log-file=" + munge + "/munged.log", "--seed-file=" + munge + "/munged.seed"});
    waitFor("munged's socket", std::chrono::seconds(30), [&] {
      return runShell(fmt::format("{0} -n -S {1}/munge.socket | {2} -S {1}/munge.socket",
                                  findProgram("munge"), munge, findProgram("unmunge")))
                 .code == 0;
    });
    slurmctld_ = startDaemon(controllerHost(), "slurmctl", "slurmctld.out",
                             {findProgram("slurmctld"), "-D"});
    for (int h = 0; h < options_.nodes; ++h) {
      slurmd_.push_back(startDaemon(h, nodeName(h), fmt::format("slurmd-{}.out", nodeName(h)),
                                    {findProgram("slurmd"), "-D", "-N", nodeName(h)}));
    }
    waitFor("every node idle in sinfo", std::chrono::seconds(60), [&] {
      checkAlive();
      return idleNodes() == options_.nodes;
    });
  }

  void checkAlive() {
    auto dead = [](ChildProcess& p) { return p.wait(std::chrono::milliseconds(0)).has_value(); };
    if (dead(*munged_)) throw std::runtime_error("munged exited");
    if (dead(*slurmctld_)) throw std::runtime_error("slurmctld exited");
    for (auto& d : slurmd_) {
      if (dead(*d)) throw std::runtime_error("a slurmd exited");
    }
  }

  template <typename Condition>
  static void waitFor(const std::string& what, std::chrono::milliseconds limit,
                      Condition condition) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        throw std::runtime_error("timed out waiting for " + what);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Network namespace inodes of the cluster's hosts.
  std::set<ino_t> namespaceInodes() const {
    std::set<ino_t> inodes;
    for (int h = 0; h < net_->hosts(); ++h) {
      struct stat st {};
      if (::stat(("/run/netns/" + net_->namespaceName(h)).c_str(), &st) == 0) {
        inodes.insert(st.st_ino);
      }
    }
    return inodes;
  }

  // Every live process (zombies left out) in one of the cluster's namespaces.
  std::vector<pid_t> processesInNamespaces() const {
    const auto inodes = namespaceInodes();
    std::vector<pid_t> pids;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      struct stat st {};
      if (::stat((entry.path() / "ns" / "net").c_str(), &st) != 0) continue;
      if (!inodes.contains(st.st_ino)) continue;
      if (processLives(std::stoi(name))) pids.push_back(std::stoi(name));
    }
    return pids;
  }

  // True when `pid` runs (exists and is no zombie waiting to be reaped).
  static bool processLives(pid_t pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
  }

  static std::optional<uid_t> processUid(pid_t pid) {
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("Uid:")) return static_cast<uid_t>(std::stoul(line.substr(4)));
    }
    return std::nullopt;
  }

  // Cancels the jobs (while slurmctld lives), then SIGKILLs every process in
  // the namespaces until none is left, then deletes them.
  void stopEverything() {
    if (slurmctld_ && !slurmctld_->wait(std::chrono::milliseconds(0))) {
      client(fmt::format("scancel --user={}", kUser));
    }
    if (net_) {
      for (int round = 0; round < 500; ++round) {
        const auto pids = processesInNamespaces();
        if (pids.empty()) break;
        for (const pid_t pid : pids) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    slurmd_.clear();  // reaps them
    slurmctld_.reset();
    munged_.reset();
    net_.reset();
  }

  Options options_;
  std::filesystem::path state_;
  uid_t uid_ = 0;
  int submitted_ = 0;
  std::unique_ptr<HostNetwork> net_;
  std::set<std::string> pythonsReady_;  // letUserRunPython done
  std::unique_ptr<ChildProcess> munged_;
  std::unique_ptr<ChildProcess> slurmctld_;
  std::vector<std::unique_ptr<ChildProcess>> slurmd_;
};

}  // namespace ddprun::harness
