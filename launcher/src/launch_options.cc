#include "launch_options.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "completion.h"
#include "ddprun/common/env.h"
#include "ddprun/common/version.h"

namespace ddprun::launcher {

namespace {

// "--nproc_per_node,--nproc-per-node" and PET_NPROC_PER_NODE for "nproc_per_node".
std::string spellings(const std::string& name, const std::string& shortName = "") {
  std::string dashed = name;
  for (char& c : dashed) c = c == '_' ? '-' : c;
  std::string all = shortName.empty() ? "" : "-" + shortName + ",";
  all += "--" + name;
  if (dashed != name) all += ",--" + dashed;
  return all;
}

std::string petName(const std::string& name) {
  std::string upper = "PET_";
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

void text(CLI::App& app, const std::string& name, std::string& target, const std::string& help,
          const std::string& shortName = "") {
  app.add_option(spellings(name, shortName), target, help)
      ->envname(petName(name))
      ->capture_default_str();
}

void flag(CLI::App& app, const std::string& name, bool& target, const std::string& help,
          const std::string& shortName = "") {
  app.add_flag(spellings(name, shortName), target, help)->envname(petName(name));
}

}  // namespace

void defineOptions(CLI::App& app, LaunchOptions& o) {
  app.description(
      "ddprun: launch a distributed data-parallel job (torchrun-compatible).\n"
      "  ddprun [options] PROGRAM [ARGS...]\n"
      "PROGRAM ending in .py (or -m MODULE) runs under ${PYTHON_EXEC:-python3} -u; any other "
      "executable runs directly. Every option can also be set as PET_<NAME> in the "
      "environment (the flag wins).");
  app.get_formatter()->column_width(34);
  app.set_version_flag("--version", versionText(o.legacyLaunch ? "ddprun-launch" : "ddprun"),
                       "print the version and the commit it was built from, and exit");
  text(app, "nproc_per_node", o.nprocPerNode,
       "workers on this node: a number, 'cpu', 'gpu', 'xpu' or 'auto' (the GPUs, else the CPUs)");
  text(app, "nnodes", o.nnodes, "number of nodes, or MIN:MAX for an elastic job");
  text(app, "node_rank", o.nodeRank, "rank of this node (static rendezvous)");
  text(app, "master_addr", o.masterAddr, "MASTER_ADDR given to workers");
  text(app, "master_port", o.masterPort, "MASTER_PORT given to workers (default: a free port)");
  flag(app, "standalone", o.standalone,
       "single-node job with a private store on a free port (the default on one node)");
  text(app, "rdzv_backend", o.rdzvBackend, "rendezvous backend: static, c10d or etcd (etcd-v2)");
  text(app, "rdzv_endpoint", o.rdzvEndpoint, "HOST[:PORT] of the rendezvous store");
  text(app, "rdzv_id", o.rdzvId, "job id shared by all nodes (also names the log directory)");
  text(app, "rdzv_conf", o.rdzvConf, "rendezvous settings KEY=VALUE[,KEY=VALUE...]");
  text(app, "max_restarts", o.maxRestarts, "restarts of the worker group before giving up");
  text(app, "max_no_progress_restarts", o.maxNoProgressRestarts,
       "restarts in a row whose attempts made no progress (no rank reached its first training "
       "step) after which the next such failure stops the job: a crash loop; -1: never");
  text(app, "no_restart_exit_code", o.noRestartExitCode,
       "exit code (1-255) when the crash-loop stop ends the job, for a scheduler not to requeue "
       "it (e.g. 93); default: the failing worker's code");
  text(app, "restart_backoff_initial", o.restartBackoffInitial,
       "seconds to wait before the second restart in a row (the first is immediate); doubles "
       "with each further failure in a row");
  text(app, "metrics_port", o.metricsPort,
       "the node that hosts the job's store serves Prometheus metrics at "
       "http://0.0.0.0:PORT/metrics; a single node, its own downtime (docs/operations.md)");
  text(app, "watchdog_timeout", o.watchdogTimeout,
       "seconds without progress (CPU or I/O) of every worker of a node after which the node is "
       "hung and its first-stalled worker fails; 0: off");
  text(app, "restart_backoff_max", o.restartBackoffMax,
       "cap of the restart back-off in seconds; an attempt that ran this long resets it; 0: "
       "never wait");
  text(app, "monitor_interval", o.monitorInterval,
       "accepted for torchrun compatibility; ddprun reacts to events, it does not poll");
  text(app, "role", o.role, "role name of the workers (ROLE_NAME)");
  text(app, "log_dir", o.logDir,
       "directory for <run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log and error.json");
  text(app, "redirects", o.redirects,
       "send worker output to log files only: 0 none, 1 stdout, 2 stderr, 3 both, or "
       "per rank 0:3,1:1",
       "r");
  text(app, "tee", o.tee, "send worker output to log files and the console (same values)", "t");
  text(app, "local_ranks_filter", o.localRanksFilter,
       "show only these local ranks' output on the console, e.g. 0,3");
  flag(app, "run_path", o.runPath, "run PROGRAM as a Python script whatever its name");
  flag(app, "module", o.module, "PROGRAM is a Python module, run as python -m", "m");
  flag(app, "no_python", o.noPython, "run PROGRAM directly, never through Python");
  text(app, "preload", o.preload,
       "Python workers are forked from a zygote per node that imported torch and the "
       "program's imports once, at launch and at each restart: auto (the default), off, or "
       "exactly these modules (comma-separated, e.g. torch,numpy) (docs/cli.md)");
  text(app, "local_addr", o.localAddr, "address of this node that other nodes can reach");
  text(app, "shutdown_timeout", o.shutdownTimeout,
       "seconds between forwarding a stop signal and SIGKILL");
  text(app, "survivor_grace", o.survivorGrace,
       "seconds the survivors of a worker's failure have between SIGTERM and SIGKILL (at most "
       "--shutdown_timeout)");
  app.add_option("--log_prefix,--log-prefix,--log_line_prefix_template,--log-line-prefix-template",
                 o.logPrefix,
                 "console prefix of worker lines; ${rank}, ${local_rank}, ${role_name}, "
                 "${node_rank}, ${hostname}; empty for none (also PET_LOG_LINE_PREFIX_TEMPLATE "
                 "and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)")
      ->envname("PET_LOG_PREFIX")
      ->capture_default_str();
  text(app, "tty", o.tty,
       "workers write to terminals of their own (isatty() true; progress bars drawn live): "
       "auto (when ddprun's output is a terminal), always, never (pipes)");
  text(app, "start_method", o.startMethod,
       "accepted for torchrun compatibility (spawn, fork, forkserver); ddprun always execs "
       "the program");
  text(app, "event_log_handler", o.eventLogHandler,
       "agent events: null (none), console (JSON lines on stderr), file:PATH (JSON lines "
       "appended to PATH)");
  text(app, "logs_specs", o.logsSpecs,
       "accepted for torchrun compatibility: only 'default' (Python plugins cannot load here)");
  text(app, "numa_binding", o.numaBinding,
       "bind each worker's CPUs and memory near its GPU: node, socket, exclusive, core-complex");
  text(app, "signals_to_handle", o.signalsToHandle,
       "signals ddprun forwards to the workers before stopping them");
  flag(app, "virtual_local_rank", o.virtualLocalRank,
       "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES narrowed to its own GPU");
  text(app, "duplicate_stdout_filters", o.duplicateStdoutFilters,
       "tee'd stdout lines containing any of these words (comma-separated, ',,' for a comma) "
       "are also copied to filtered_stdout.log");
  text(app, "duplicate_stderr_filters", o.duplicateStderrFilters,
       "the same for stderr (filtered_stderr.log)");
  text(app, "worker_store", o.workerStore,
       "where workers' init_process_group finds its TCPStore: 'agent' (MASTER_ADDR:PORT is "
       "ddprun's store, TORCHELASTIC_USE_AGENT_STORE=True, as torchrun 2.x) or 'rank0' (worker "
       "rank 0 hosts one on a free port, as torchrun 1.13)");
  text(app, "store_relay", o.storeRelay,
       "workers reach their store through this node's relay (MASTER_ADDR=127.0.0.1, one "
       "authenticated connection per node to the store, identical reads shared): auto (jobs "
       "of several nodes on the agent store), on, off (every worker connects to the store "
       "itself, as under torchrun)");
  flag(app, "strict_store", o.strictStore,
       "ddprun's store refuses PyTorch TCPStore clients, which cannot send the token "
       "(implies --worker_store=rank0)");
  if (o.legacyLaunch) {
    app.name("ddprun-launch");
    app.description(
        "ddprun-launch: torch.distributed.launch's command line on ddprun.\n"
        "  ddprun-launch [options] SCRIPT [ARGS...]\n"
        "The script gets --local-rank=N (--local_rank=N under PyTorch before 2.0) before its "
        "own arguments, as python -m torch.distributed.launch passes it; with --use_env it gets "
        "LOCAL_RANK only. Every ddprun option is accepted.");
    flag(app, "use_env", o.useEnv,
         "pass the local rank in LOCAL_RANK only, not as --local-rank=N (needed with "
         "--no_python)");
  }
  // torchrun 2.14's --print-completion: prints the script and exits 0, with
  // no program needed; no PET_ variable (torchrun has none either).
  app.add_option("--print_completion,--print-completion", o.printCompletion,
                 "print a shell completion script for ddprun (bash, zsh or tcsh) and exit")
      ->check(CLI::IsMember({"bash", "zsh", "tcsh"}))
      ->each([&app](const std::string& shell) {
        std::cout << completionScript(app, shell);
        throw CLI::Success();
      });
  // Everything from the first positional argument on is the program and
  // its arguments, passed untouched (collected from remaining()).
  app.prefix_command();
}

namespace {

// CLI11 reads "--opt=" (an empty value) as "take the next argument": split
// it into "--opt" "" instead, for ddprun's own options only, i.e. before the
// program name. Flags take no value; every other option takes one.
std::vector<std::string> splitEmptyValues(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") break;  // the program starts here
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const CLI::Option* option = nullptr;
    try {
      option = app.get_option(name);
    } catch (const CLI::OptionNotFound&) {
    }
    if (eq != std::string::npos) {
      args.push_back(name);
      args.push_back(arg.substr(eq + 1));
      continue;
    }
    args.push_back(arg);
    if (option != nullptr && option->get_expected_min() > 0 && i + 1 < argc) {
      args.push_back(argv[++i]);  // its value, whatever it looks like
    }
  }
  for (; i < argc; ++i) args.push_back(argv[i]);
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  return args;
}

}  // namespace

int parseCommandLine(int argc, char** argv, LaunchOptions& options) {
  CLI::App app;
  defineOptions(app, options);
  try {
    std::vector<std::string> args = splitEmptyValues(app, argc, argv);
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::Success&) {
    return 0;  // --print_completion printed its script
  } catch (const CLI::ParseError& e) {
    const char* name = options.legacyLaunch ? "ddprun-launch" : "ddprun";
    std::cerr << name << ": error: " << e.what() << "; see " << name << " --help\n";
    return 2;
  }
  for (const auto& rest : app.remaining()) options.program.push_back(rest);
  // "--" ends ddprun's options (torchrun's argparse REMAINDER accepts it too).
  if (!options.program.empty() && options.program.front() == "--") {
    options.program.erase(options.program.begin());
  }
  for (const CLI::Option* option : app.get_options()) {
    const auto& names = option->get_lnames();  // without dashes: "nproc_per_node", ...
    if (names.empty()) continue;
    if (option->count() > 0 || std::getenv(petName(names.front()).c_str()) != nullptr) {
      options.given.insert(names.front());
    }
  }
  return -1;
}

}  // namespace ddprun::launcher
