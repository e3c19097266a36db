#include "run_config.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "accelerator_count.h"
#include "ddprun/common/env.h"
#include "ddprun/common/environment.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/slurm.h"
#include "endpoint.h"
#include "gpu_count.h"
#include "rendezvous_options.h"
#include "torch_version.h"

namespace ddprun::launcher {

namespace fs = std::filesystem;

namespace {

int cpuCount() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int integerOption(const std::string& name, const std::string& text, long long min, long long max,
                  const std::string& example) {
  auto value = parseInteger(text);
  if (!value || *value < min || *value > max) {
    throw ConfigError(fmt::format("--{}={} is not a whole number from {} to {}; give e.g. --{}={}",
                                  name, text, min, max, name, example));
  }
  return static_cast<int>(*value);
}

std::chrono::milliseconds secondsOption(const std::string& name, const std::string& text) {
  const auto value = parseDuration(text, 1e9);
  if (!value) {
    throw ConfigError(fmt::format(
        "--{}={} is not a number of seconds (0 or more); give e.g. --{}=30", name, text, name));
  }
  return *value;
}

agent::StdSpec stdSpecOption(const std::string& name, const std::string& text) {
  std::string error;
  auto spec = agent::parseStdSpec(text, error);
  if (!spec) {
    throw ConfigError(
        fmt::format("--{}: {}; give e.g. --{}=3 or --{}=0:3,1:1", name, error, name, name));
  }
  return *spec;
}

std::set<int> parseRanksFilter(const std::string& text, int nproc) {
  std::set<int> ranks;
  for (std::string_view item : splitList(text)) {
    auto value = parseInteger(item);
    if (!value || *value < 0 || *value >= nproc) {
      throw ConfigError(
          fmt::format("--local_ranks_filter={}: '{}' is not a local rank from 0 to {}; give e.g. "
                      "--local_ranks_filter=0",
                      text, item, nproc - 1));
    }
    ranks.insert(static_cast<int>(*value));
  }
  return ranks;
}

std::string hostName() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
}

std::string randomRunId() { return randomToken().substr(0, 12); }

// "SIGTERM,SIGUSR1" -> numbers; names any case, with or without SIG.
std::vector<int> parseSignals(const std::string& text) {
  std::vector<int> signals;
  for (std::string_view item : splitList(text)) {
    const std::string_view name = trimSpaces(item);
    const auto sig = signalNumber(name);
    if (!sig) {
      throw ConfigError(
          fmt::format("--signals_to_handle={}: '{}' is not a signal name; give e.g. "
                      "--signals_to_handle=SIGTERM,SIGINT,SIGUSR1",
                      text, name));
    }
    if (*sig == SIGKILL || *sig == SIGSTOP || *sig == SIGCHLD || *sig == SIGSEGV ||
        *sig == SIGBUS || *sig == SIGFPE || *sig == SIGILL || *sig == SIGPIPE) {
      throw ConfigError(fmt::format(
          "--signals_to_handle={}: {} cannot be forwarded (ddprun {} it itself); drop it", text,
          signalName(*sig), *sig == SIGKILL || *sig == SIGSTOP ? "cannot catch" : "needs"));
    }
    if (std::find(signals.begin(), signals.end(), *sig) == signals.end()) signals.push_back(*sig);
  }
  return signals;
}

// torchrun's duplicate-filter list: comma-separated, ",," is a comma.
std::vector<std::string> parseFilterList(const std::string& text) {
  std::vector<std::string> items(1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      items.back() += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      items.back() += ',';
      ++i;
    } else {
      items.emplace_back();
    }
  }
  std::erase_if(items, [](const std::string& item) { return item.empty(); });
  return items;
}

agent::EventLogConfig parseEventLogHandler(const std::string& text) {
  agent::EventLogConfig log;
  if (text == "null" || text == "dynamic_rendezvous") return log;
  if (text == "console") {
    log.kind = agent::EventLogConfig::Kind::kConsole;
    return log;
  }
  if (text.starts_with("file:") && text.size() > 5) {
    log.kind = agent::EventLogConfig::Kind::kFile;
    log.file = fs::absolute(text.substr(5));
    return log;
  }
  throw ConfigError(
      fmt::format("--event_log_handler={} is not null, console or file:PATH; give e.g. "
                  "--event_log_handler=console",
                  text));
}

// Enables NCCL's async error handling under the name the workers' PyTorch
// reads (docs/env.md); the value is the user's, under either name, else 1.
void chooseNcclVariable(agent::AgentConfig& config, const std::optional<TorchVersion>& version) {
  config.ncclAsyncErrorHandlingName = env::kNcclAsyncErrorHandling;
  if (version && (version->major < 2 || (version->major == 2 && version->minor < 2))) {
    config.ncclAsyncErrorHandlingName = env::kNcclAsyncErrorHandlingOld;
  }
}

// ddprun-launch without --use_env: the script's first arguments are
// --local-rank=${local_rank} (the worker group fills in the number), spelt
// --local_rank before PyTorch 2.0, as torch.distributed.launch passes it.
void addLocalRankArgument(const LaunchOptions& o, agent::AgentConfig& config,
                          const std::optional<TorchVersion>& version) {
  if (!o.legacyLaunch || o.useEnv) return;
  if (o.noPython) {
    throw ConfigError(
        "--no_python needs --use_env: a program that is not run by Python gets the local rank in "
        "LOCAL_RANK only (as with torch.distributed.launch); add --use_env");
  }
  const bool underscore = version && version->major < 2;
  // command: PYTHON -u [-m] SCRIPT ARGS... (or PROGRAM ARGS...); the
  // argument goes right after SCRIPT.
  std::size_t script = 0;
  if (config.pythonProgram) script = config.command[2] == "-m" ? 3 : 2;
  config.command.insert(config.command.begin() + static_cast<std::ptrdiff_t>(script) + 1,
                        underscore ? "--local_rank=${local_rank}" : "--local-rank=${local_rank}");
}

}  // namespace

int parseNproc(const std::string& text) {
  if (text == "cpu") return cpuCount();  // the CPUs this process may use, as 2.14
  if (text == "gpu") {
    if (const int gpus = countVisibleGpus(); gpus > 0) return gpus;
    if (const int gpus = countAmdGpus(); gpus > 0) return gpus;  // ROCm's torch calls them cuda
    throw ConfigError(
        "--nproc_per_node=gpu but no GPU is visible (no NVIDIA or AMD GPU driver, or "
        "CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES hides them all); use --nproc_per_node=cpu or "
        "a number");
  }
  if (text == "xpu") {
    if (const int xpus = countIntelXpus(); xpus > 0) return xpus;
    throw ConfigError(
        "--nproc_per_node=xpu but no Intel GPU is visible (none bound to the i915 or xe driver, "
        "or ZE_AFFINITY_MASK hides them all); use --nproc_per_node=cpu or a number");
  }
  if (text == "auto") {
    // The accelerators present, NVIDIA, AMD, then Intel, else the CPUs.
    // torchrun 2.14 asks torch.accelerator, which knows only the one its
    // build targets (a CPU-only torch counts CPUs on a GPU node).
    for (int (*count)() : {+[] { return countVisibleGpus(); }, +[] { return countAmdGpus(); },
                           +[] { return countIntelXpus(); }}) {
      if (const int devices = count(); devices > 0) return devices;
    }
    return cpuCount();
  }
  auto value = parseInteger(text);
  if (!value || *value < 1 || *value > 65536) {
    throw ConfigError(fmt::format(
        "--nproc_per_node={} is not a positive number, 'cpu', 'gpu', 'xpu' or 'auto'; give e.g. "
        "--nproc_per_node=4",
        text));
  }
  return static_cast<int>(*value);
}

NodeRange parseNnodes(const std::string& text) {
  const std::size_t colon = text.find(':');
  const auto min = parseInteger(text.substr(0, colon));
  const auto max = colon == std::string::npos ? min : parseInteger(text.substr(colon + 1));
  if (!min || !max || *min < 1 || *max < *min || *max > 1'000'000) {
    throw ConfigError(fmt::format(
        "--nnodes={} is not a node count N or a range MIN:MAX with 1 <= MIN <= MAX; give e.g. "
        "--nnodes=2 or --nnodes=1:4",
        text));
  }
  return {static_cast<int>(*min), static_cast<int>(*max)};
}

std::string resolveExecutable(const std::string& name, const std::string& what) {
  auto usable = [](const fs::path& p) {
    std::error_code ec;
    // access() alone is not enough: for root it grants X_OK on some
    // files without any execute bit.
    const auto perms = fs::status(p, ec).permissions();
    const bool anyExec =
        (perms & (fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec)) !=
        fs::perms::none;
    return fs::is_regular_file(p, ec) && anyExec && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    std::error_code ec;
    if (!fs::exists(name, ec)) {
      throw ConfigError(fmt::format("{} '{}' does not exist; check the path", what, name));
    }
    if (!usable(name)) {
      throw ConfigError(
          fmt::format("{} '{}' is not an executable file; run chmod +x on it, or give a .py script",
                      what, name));
    }
    return fs::absolute(name).lexically_normal().string();
  }
  for (const auto& dir : executableSearchPath()) {
    if (usable(fs::path(dir) / name))
      return fs::absolute(fs::path(dir) / name).lexically_normal().string();
  }
  throw ConfigError(fmt::format(
      "{} '{}' was not found on PATH; give its path (e.g. ./{}) or install it", what, name, name));
}

namespace {

// Fills command and programName from the program options; true when the
// program runs under Python.
bool resolveProgram(const LaunchOptions& o, agent::AgentConfig& config) {
  if (o.program.empty()) {
    throw ConfigError(
        "no program to run; give one after the options, e.g. ddprun --nproc_per_node=2 "
        "train.py");
  }
  if (o.module && o.noPython) {
    throw ConfigError("-m/--module and --no_python contradict each other; drop one of them");
  }
  if (o.runPath && o.noPython) {
    throw ConfigError("--run_path and --no_python contradict each other; drop one of them");
  }
  const std::string& first = o.program.front();
  const std::vector<std::string> args(o.program.begin() + 1, o.program.end());
  const bool python =
      o.module || o.runPath || (!o.noPython && first.size() > 3 && first.ends_with(".py"));
  if (!python) {
    config.command.push_back(resolveExecutable(first, "the program"));
    config.programName = fs::path(first).filename().string();
  } else {
    const char* pythonExec = std::getenv(env::kPythonExec);
    const std::string interpreter = pythonExec && *pythonExec ? pythonExec : "python3";
    config.command.push_back(
        resolveExecutable(interpreter, "the Python interpreter (PYTHON_EXEC)"));
    config.command.push_back("-u");
    if (o.module) {
      config.command.push_back("-m");
      config.programName = first;
    } else {
      std::error_code ec;
      if (!fs::is_regular_file(first, ec)) {
        throw ConfigError(fmt::format("the script '{}' does not exist; check the path", first));
      }
      config.programName = fs::path(first).filename().string();
    }
    config.command.push_back(first);
  }
  config.command.insert(config.command.end(), args.begin(), args.end());
  return python;
}

// --preload: auto (also when not given) or off, else module names.
std::vector<std::string> parsePreload(const std::string& text, bool python,
                                      const std::string& program, agent::PreloadMode& mode) {
  if (text.empty() || text == "auto") {
    // Python programs only: anything else is exec'd.
    mode = python ? agent::PreloadMode::kAuto : agent::PreloadMode::kOff;
    return {};
  }
  mode = agent::PreloadMode::kOff;
  if (text == "off") return {};
  std::vector<std::string> modules;
  std::string current;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      current += text[i];
      continue;
    }
    const bool valid =
        !current.empty() && current.front() != '.' && current.back() != '.' &&
        current.find("..") == std::string::npos &&
        std::all_of(current.begin(), current.end(),
                    [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                    }) &&
        !std::isdigit(static_cast<unsigned char>(current.front()));
    if (!current.empty() && !valid) {
      throw ConfigError(
          fmt::format("--preload: '{}' is not a Python module name; give auto, off or module names "
                      "separated by commas, e.g. --preload torch,numpy",
                      current));
    }
    if (current == "auto" || current == "off") {
      throw ConfigError(fmt::format(
          "--preload: '{}' cannot be combined with module names; give --preload {} alone, or "
          "only module names, e.g. --preload torch,numpy",
          current, current));
    }
    if (!current.empty()) modules.push_back(current);
    current.clear();
  }
  if (!modules.empty() && !python) {
    throw ConfigError(fmt::format(
        "--preload forks Python workers from a zygote, but '{}' does not run under Python; give "
        "a .py script, -m MODULE or --run_path, or drop --preload",
        program));
  }
  if (!modules.empty()) mode = agent::PreloadMode::kModules;
  return modules;
}

// What a failure costs: the restart budgets and the back-off between
// restarts.
agent::RestartConfig restartOptions(const LaunchOptions& o) {
  agent::RestartConfig restarts;
  restarts.maxRestarts = integerOption("max_restarts", o.maxRestarts, 0, 1'000'000, "3");
  restarts.maxNoProgressRestarts =
      integerOption("max_no_progress_restarts", o.maxNoProgressRestarts, -1, 1'000'000, "3");
  if (!o.noRestartExitCode.empty()) {
    restarts.noRestartExitCode =
        integerOption("no_restart_exit_code", o.noRestartExitCode, 1, 255, "93");
  }
  secondsOption("monitor_interval", o.monitorInterval);
  restarts.backoff.initial = secondsOption("restart_backoff_initial", o.restartBackoffInitial);
  restarts.backoff.max = secondsOption("restart_backoff_max", o.restartBackoffMax);
  return restarts;
}

// How the workers are stopped: the shutdown's timeouts (shorter under
// Slurm, before its SIGKILL) and the signals that stop them.
agent::StopConfig stopOptions(const LaunchOptions& o) {
  agent::StopConfig stopping;
  const char* shutdownEnv = std::getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (!o.isGiven("shutdown_timeout") && shutdownEnv != nullptr) {
    stopping.shutdownTimeout =
        secondsOption("shutdown_timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT)", shutdownEnv);
  } else {
    stopping.shutdownTimeout = secondsOption("shutdown_timeout", o.shutdownTimeout);
  }
  stopping.survivorGrace = secondsOption("survivor_grace", o.survivorGrace);
  // Under Slurm, scancel and the time limit send SIGTERM to every process
  // of the step and SIGKILL KillWait later (30 s by default): ddprun's own
  // SIGKILL, its report and its error file must come before that.
  if (const char* jobId = std::getenv(env::kSlurmJobId); jobId != nullptr && *jobId != '\0') {
    stopping.underSlurm = true;
    if (!o.isGiven("shutdown_timeout") && shutdownEnv == nullptr) {
      stopping.shutdownTimeout = kSlurmShutdownTimeout;
    }
  }
  stopping.forwardedSignals = parseSignals(o.signalsToHandle);
  // Workers get the list in Python's spelling (SIGTERM,...), whatever the
  // user typed: a start_processes() nested in a worker parses it with
  // getattr(signal, name) and warns on any other spelling.
  std::vector<std::string> names;
  for (int sig : stopping.forwardedSignals) names.push_back(signalName(sig));
  stopping.signalsToHandle = fmt::format("{}", fmt::join(names, ","));
  return stopping;
}

// What watches the workers: the progress hook, the hang watchdog and the
// uninterruptible-sleep timeout.
agent::SelfHealingConfig selfHealingOptions(const LaunchOptions& o) {
  agent::SelfHealingConfig healing;
  if (const char* hook = std::getenv(env::kProgressHook); hook != nullptr && *hook != '\0') {
    if (std::string(hook) != "0" && std::string(hook) != "1") {
      throw ConfigError(fmt::format("{}={} must be 0 (no progress hook) or 1; give e.g. {}=0",
                                    env::kProgressHook, hook, env::kProgressHook));
    }
    healing.progressHook = std::string(hook) == "1";
  }
  healing.watchdogTimeout = secondsOption("watchdog_timeout", o.watchdogTimeout);
  if (const char* text = std::getenv(env::kUninterruptibleStateTimeout);
      text != nullptr && *text != '\0') {
    // torchrun 2.13+ turns an unreadable value off silently; ddprun says so.
    const auto value = parseDuration(text, 1e9);
    if (!value) {
      throw ConfigError(
          fmt::format("{}={} is not a number of seconds (0 or more, 0 = off); give e.g. {}=600",
                      env::kUninterruptibleStateTimeout, text, env::kUninterruptibleStateTimeout));
    }
    healing.uninterruptibleStateTimeout = *value;
  }
  return healing;
}

// The torchrun options that ddprun accepts but has no use for.
void checkUnusedOptions(const LaunchOptions& o, std::string& notices) {
  if (o.startMethod != "spawn" && o.startMethod != "fork" && o.startMethod != "forkserver") {
    throw ConfigError(fmt::format(
        "--start_method={} is not spawn, fork or forkserver; drop it (ddprun execs the program)",
        o.startMethod));
  }
  if (o.isGiven("start_method")) {
    notices += fmt::format(
        "ddprun: notice: --start_method={} has no effect: ddprun starts every worker by "
        "exec'ing the program (torchrun uses it only for Python function entry points)\n",
        o.startMethod);
  }
  if (!o.logsSpecs.empty() && o.logsSpecs != "default") {
    throw ConfigError(fmt::format(
        "--logs_specs={} names a Python plugin (entry point torchrun.logs_specs), which ddprun "
        "cannot load; drop it: ddprun writes torchrun's default log layout",
        o.logsSpecs));
  }
  if (o.isGiven("logs_specs")) {
    notices +=
        "ddprun: notice: --logs_specs=default is what ddprun always does (torchrun's default "
        "log layout)\n";
  }
}

// Where the workers' output and the launch's records go.
agent::OutputConfig outputOptions(const LaunchOptions& o, int nprocPerNode) {
  agent::OutputConfig output;
  output.eventLog = parseEventLogHandler(o.eventLogHandler);
  output.duplicateStdoutFilters = parseFilterList(o.duplicateStdoutFilters);
  output.duplicateStderrFilters = parseFilterList(o.duplicateStderrFilters);
  if (const char* errorFile = std::getenv(env::kErrorFile); errorFile && *errorFile) {
    output.launcherErrorFile = fs::absolute(errorFile);
  }
  output.redirects = stdSpecOption("redirects", o.redirects);
  output.tee = stdSpecOption("tee", o.tee);
  if (!o.localRanksFilter.empty()) {
    output.localRanksFilter = parseRanksFilter(o.localRanksFilter, nprocPerNode);
  }
  if (!o.logDir.empty()) {
    std::error_code ec;
    if (fs::exists(o.logDir, ec) && !fs::is_directory(o.logDir, ec) && o.logDir != "/dev/null") {
      throw ConfigError(fmt::format(
          "--log_dir={} exists and is not a directory; give a directory path", o.logDir));
    }
    if (o.logDir != "/dev/null") output.logDir = fs::absolute(o.logDir);
  }
  output.keepLogs = output.redirects.any() || output.tee.any();
  // --log_prefix / --log_line_prefix_template > PET_* > torchrun's variable.
  if (o.isGiven("log_prefix")) {
    output.logPrefixTemplate = o.logPrefix;
  } else if (const char* p = std::getenv("PET_LOG_LINE_PREFIX_TEMPLATE"); p != nullptr) {
    output.logPrefixTemplate = p;
  } else if (const char* t = std::getenv(env::kLogLinePrefixTemplate); t != nullptr) {
    output.logPrefixTemplate = t;
  }
  if (o.tty == "auto") {
    output.tty = agent::WorkerTty::kAuto;
  } else if (o.tty == "always") {
    output.tty = agent::WorkerTty::kAlways;
  } else if (o.tty == "never") {
    output.tty = agent::WorkerTty::kNever;
  } else {
    throw ConfigError(fmt::format("--tty={} is not auto, always or never", o.tty));
  }
  return output;
}

// Where each worker runs: its NUMA binding and its view of the devices.
void applyPlacementOptions(const LaunchOptions& o, agent::AgentConfig& config) {
  if (!o.numaBinding.empty() && o.numaBinding != "node" && o.numaBinding != "socket" &&
      o.numaBinding != "exclusive" && o.numaBinding != "core-complex") {
    throw ConfigError(
        fmt::format("--numa_binding={} is not node, socket, exclusive or core-complex; give e.g. "
                    "--numa_binding=node",
                    o.numaBinding));
  }
  config.numaBinding = o.numaBinding;
  config.virtualLocalRank = o.virtualLocalRank;
}

// The program, what is preloaded for it and the arguments PyTorch's
// version asks for.
void applyProgramOptions(const LaunchOptions& o, agent::AgentConfig& config) {
  const bool python = resolveProgram(o, config);
  config.pythonProgram = python;
  config.preload = parsePreload(o.preload, python, config.programName, config.preloadMode);
  const auto torchVersion =
      python ? probeTorchVersion(config.command.front()) : std::optional<TorchVersion>();
  chooseNcclVariable(config, torchVersion);
  addLocalRankArgument(o, config, torchVersion);
}

// Which store the workers use (the agent's, or worker rank 0's) and
// whether the node relay carries it.
void applyWorkerStoreOptions(const LaunchOptions& o, agent::AgentConfig& config) {
  if (o.workerStore != "agent" && o.workerStore != "rank0") {
    throw ConfigError(fmt::format("--worker_store={} is not 'agent' or 'rank0'", o.workerStore));
  }
  config.strictStore = o.strictStore;
  config.useAgentStore = o.workerStore == "agent";
  if (!o.isGiven("worker_store")) {
    // torchrun 2.x's switch for the same choice.
    const char* disable = std::getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
    if (disable != nullptr && std::string(disable) == "1") config.useAgentStore = false;
    if (o.strictStore) config.useAgentStore = false;
    // A job of one worker shares its store with nobody: the worker hosts its
    // own, as under plain `python`. So a script that starts its own ranks
    // (torch.multiprocessing.spawn) on a MASTER_PORT it chose works, or
    // fails with PyTorch's EADDRINUSE when that port is taken, instead of
    // all its ranks waiting as clients of a store nobody serves there
    // (TORCHELASTIC_USE_AGENT_STORE=True: torchrun 2.x hangs so).
    // Except under torchft (its lighthouse named, as its README launches
    // one worker per replica group): its Manager only connects to
    // MASTER_ADDR:MASTER_PORT as a client, so the agent's store must be there.
    const bool torchft = std::getenv("TORCHFT_LIGHTHOUSE") != nullptr;
    if (config.nprocPerNode == 1 && config.rendezvous.maxNodes == 1 && !torchft) {
      config.useAgentStore = false;
    }
  } else if (o.strictStore && config.useAgentStore) {
    throw ConfigError(
        "--strict_store and --worker_store=agent contradict each other: a strict store refuses "
        "the workers' PyTorch clients; use --worker_store=rank0");
  }
  if (config.rendezvous.backend == agent::RendezvousBackendKind::kEtcd) {
    // With etcd no ddprun store holds the rounds: the workers' store is the
    // one group rank 0's agent serves, so it must accept PyTorch's clients.
    if (o.workerStore == "rank0" && o.isGiven("worker_store")) {
      throw ConfigError(
          "--worker_store=rank0 cannot be used with --rdzv_backend=etcd: the workers' store is "
          "the one group rank 0's agent serves; drop --worker_store");
    }
    if (o.strictStore) {
      throw ConfigError(
          "--strict_store cannot be used with --rdzv_backend=etcd: the workers' store must accept "
          "PyTorch's clients; drop --strict_store (etcd's TLS guards the rendezvous)");
    }
    config.useAgentStore = true;  // TORCH_DISABLE_SHARE_RDZV_TCP_STORE has no say
  }
  if (o.storeRelay != "auto" && o.storeRelay != "on" && o.storeRelay != "off") {
    throw ConfigError(fmt::format("--store_relay={} is not 'auto', 'on' or 'off'", o.storeRelay));
  }
  if (o.storeRelay == "on" && !config.useAgentStore) {
    throw ConfigError(
        "--store_relay=on needs the workers on the agent's store, but here worker rank 0 hosts "
        "its own TCPStore (--worker_store=rank0, --strict_store, "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, or a job of one worker); drop --store_relay or "
        "use --worker_store=agent");
  }
  // auto: every job that can span nodes (docs/multinode.md, "The node
  // relay"; docs/security.md): between nodes only the agents' authenticated
  // protocol travels, and no worker opens a PyTorch TCPStore connection to
  // another host.
  config.relayWorkersStore =
      o.storeRelay == "on" ||
      (o.storeRelay == "auto" && config.useAgentStore && config.rendezvous.maxNodes > 1);
}

// The job's id and role, this host's name and the workers' default thread count.
void applyJobIdentity(const LaunchOptions& o, agent::AgentConfig& config, std::string& notices) {
  // Every node of a job must name the same rendezvous: only a job of one
  // node gets a random id when none was given.
  const bool single = config.rendezvous.mode == agent::RendezvousMode::kStandalone;
  config.runId = (o.rdzvId.empty() || o.rdzvId == "none") && single ? randomRunId()
                 : o.rdzvId.empty()                                 ? "none"
                                                                    : o.rdzvId;
  if (config.runId.find('/') != std::string::npos || config.runId == "." || config.runId == "..") {
    throw ConfigError(fmt::format(
        "--rdzv_id={} cannot name a directory; use letters, digits, '-' or '_'", o.rdzvId));
  }
  if (o.role.empty()) {
    throw ConfigError("--role is empty; give a name, e.g. --role=trainer");
  }
  config.role = o.role;
  config.hostname = hostName();
  if (std::getenv(env::kOmpNumThreads) == nullptr && config.nprocPerNode > 1) {
    config.extraEnv[env::kOmpNumThreads] = "1";
    notices +=
        "*****************************************\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed. \n"
        "*****************************************\n";
  }
}

}  // namespace

agent::AgentConfig buildAgentConfig(const LaunchOptions& o, std::string& notices) {
  agent::AgentConfig config;
  if (!o.program.empty() && o.program.front().starts_with("-")) {
    throw ConfigError(fmt::format("unknown option '{}'; see ddprun --help", o.program.front()));
  }
  config.nprocPerNode = parseNproc(o.nprocPerNode);
  if (o.rdzvBackend != "static" && o.rdzvBackend != "c10d" && o.rdzvBackend != "etcd" &&
      o.rdzvBackend != "etcd-v2") {
    throw ConfigError(fmt::format(
        "--rdzv_backend={} is not static, c10d, etcd or etcd-v2; give one of them", o.rdzvBackend));
  }
  if (o.masterAddr.empty()) {
    throw ConfigError("--master_addr is empty; give an address, e.g. --master_addr=127.0.0.1");
  }
  if (!o.masterPort.empty()) integerOption("master_port", o.masterPort, 1, 65535, "29500");
  integerOption("node_rank", o.nodeRank, 0, 1'000'000, "0");
  config.masterAddr = parseHost("master_addr", o.masterAddr);
  applyRendezvousOptions(o, environmentMap(), config);
  config.restarts = restartOptions(o);
  config.selfHealing = selfHealingOptions(o);
  if (!o.metricsPort.empty()) {
    config.rendezvous.metricsPort =
        static_cast<int>(integerOption("metrics_port", o.metricsPort, 1, 65535, "9400"));
    if (config.rendezvous.backend == agent::RendezvousBackendKind::kEtcd) {
      throw ConfigError(
          "--metrics_port serves the metrics of a job's ddprun store (c10d or static), or of a "
          "single node; this job's rounds live in etcd: use etcd's own /metrics and `ddprun "
          "status`; drop --metrics_port");
    }
  }
  config.stopping = stopOptions(o);
  checkUnusedOptions(o, notices);
  config.output = outputOptions(o, config.nprocPerNode);
  applyPlacementOptions(o, config);
  applyProgramOptions(o, config);
  applyWorkerStoreOptions(o, config);
  applyJobIdentity(o, config, notices);
  return config;
}

}  // namespace ddprun::launcher
