// AgentConfig: everything one node's agent needs to run its workers. The
// launcher builds it from the command line; it is immutable afterwards.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/std_spec.h"
#include "ddprun/rendezvous/etcd_options.h"

namespace ddprun::agent {

// --preload's policy (AgentConfig::preloadMode).
enum class PreloadMode { kOff, kAuto, kModules };

// How this node meets the others.
enum class RendezvousMode {
  kStandalone,  // one node, a private store on 127.0.0.1
  kStatic,      // --nnodes=N --node_rank=R --master_addr=A --master_port=P
  kDynamic,     // --nnodes=MIN:MAX --rdzv_backend=c10d --rdzv_endpoint=H:P
};

// Where a multi-node job's rounds live.
enum class RendezvousBackendKind {
  kStore,  // ddprun's store (hosted by a node or ddprun-rendezvous): c10d, static
  kEtcd,   // an etcd cluster (--rdzv_backend=etcd): survives any node
};

// --tty: whether workers write to terminals of their own.
enum class WorkerTty {
  kAuto,    // a stream shown on a terminal console gets a terminal; output is drawn live
  kAlways,  // every stream gets a terminal, wherever it goes (colour in log files)
  kNever,   // pipes; the console gets whole lines only, as ddprun always did
};

struct RendezvousConfig {
  RendezvousMode mode = RendezvousMode::kStandalone;
  RendezvousBackendKind backend = RendezvousBackendKind::kStore;
  // kEtcd: the members' "host:port", TLS and the key prefix (rdzv_conf
  // protocol, ca_cert, cert, key, etcd_prefix; docs/multinode.md).
  rendezvous::EtcdOptions etcd;
  // --metrics_port: the node hosting the store serves /metrics there; -1: no.
  int metricsPort = -1;
  std::string endpointHost;  // the store every node uses
  std::uint16_t endpointPort = 0;
  std::optional<bool> isHost;  // host the store here; unset: decide (docs/multinode.md)
  int minNodes = 1;
  int maxNodes = 1;
  // The nodes that can ever take part (a Slurm job step's); 0: any may join
  // later. A lost one never returns: the job fails once fewer than
  // minNodes are left (protocol::JoinRequest::fixedNodes).
  int fixedNodes = 0;
  int nodeRank = -1;      // requested group rank, -1: by arrival
  std::string localAddr;  // address other nodes reach this node at
  std::string token;      // shared by every node (DDPRUN_TOKEN or token_file)
  // Said once per job, by group rank 0's node: that the store is open (no
  // token). Empty: nothing to say.
  std::string openStoreNotice;
  std::chrono::milliseconds joinTimeout{std::chrono::seconds(600)};
  std::chrono::milliseconds lastCallTimeout{std::chrono::seconds(30)};
  std::chrono::milliseconds closeTimeout{std::chrono::seconds(30)};
  std::chrono::milliseconds keepAliveInterval{std::chrono::seconds(5)};
  int keepAliveMaxAttempts = 3;
  // Deadline of one store request of the agent (rdzv_conf read_timeout).
  std::chrono::milliseconds requestTimeout{std::chrono::seconds(60)};
  // Elastic jobs: a host whose workers fail in this many rounds in a row is
  // left out for nodeCooldown (rdzv_conf max_node_failures, node_cooldown).
  // 0: never.
  int maxNodeFailures = 3;
  std::chrono::milliseconds nodeCooldown{std::chrono::minutes(10)};
  // etcd: how long a job's keys outlive its last node (rdzv_conf job_ttl;
  // at least 4 x the node lease's TTL).
  std::chrono::milliseconds jobTtl{std::chrono::seconds(60)};
  // While waiting for a round: a progress line this often when stderr is
  // not a terminal (a terminal's status line is redrawn every second).
  // Zero: no progress output at all.
  std::chrono::milliseconds progressInterval{std::chrono::seconds(10)};
};

// --event_log_handler: where the agent's events go (docs/cli.md).
struct EventLogConfig {
  enum class Kind { kNull, kConsole, kFile } kind = Kind::kNull;
  std::filesystem::path file;  // kFile: JSON lines appended here
};

// --restart_backoff_initial / --restart_backoff_max (docs/self-healing.md):
// the first restart is immediate, later ones in a row wait from `initial`
// doubling up to `max`, with jitter. max zero: never wait.
struct RestartBackoffConfig {
  std::chrono::milliseconds initial{std::chrono::seconds(1)};
  std::chrono::milliseconds max{std::chrono::seconds(30)};
};

// The option groups, each validated by the launcher into its slice
// (launcher/src/run_config.cc) and cut further for the rooms.

// What a failure costs: --max_restarts, the crash-loop stop, the back-off.
struct RestartConfig {
  int maxRestarts = 0;
  // The crash-loop stop (docs/operations.md, "Crash loops"): restarts in a
  // row without progress allowed (-1: never stop), and the exit code then
  // (none: the failing worker's).
  int maxNoProgressRestarts = 3;
  std::optional<int> noRestartExitCode;
  RestartBackoffConfig backoff;
};

// What watches the workers.
struct SelfHealingConfig {
  // Python workers get ddprun's progress hook (DDPRUN_PROGRESS_HOOK=0: not).
  bool progressHook = true;
  // --watchdog_timeout: a node none of whose workers progressed (CPU or
  // I/O) for this long is hung; its first-stalled worker fails. Zero: off.
  std::chrono::milliseconds watchdogTimeout{0};
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: a worker in uninterruptible
  // sleep (state D) this long makes the node unhealthy: its workers are
  // stopped and not restarted. Zero: off.
  std::chrono::milliseconds uninterruptibleStateTimeout{0};
};

// How the workers are stopped, and which signals stop them.
struct StopConfig {
  // SIGTERM to SIGKILL grace when stopping workers.
  std::chrono::milliseconds shutdownTimeout{std::chrono::seconds(30)};
  // A worker's failure stops its survivors (and those of other nodes) with
  // SIGTERM, then SIGKILL after this (at most shutdownTimeout, which a stop
  // signal from the user or the scheduler keeps): their world is broken, so
  // a handler may flush, not talk to its peers (docs/cli.md).
  std::chrono::milliseconds survivorGrace{50};
  // Signals ddprun handles and forwards to every worker's process group.
  std::vector<int> forwardedSignals;
  // TORCHELASTIC_SIGNALS_TO_HANDLE for workers: the forwarded signals in
  // Python's spelling ("SIGTERM,SIGINT"), however --signals_to_handle spelt them.
  std::string signalsToHandle;
  // Under Slurm (SLURM_JOB_ID): a signal sent by a slurmstepd went to every
  // process of the job step, the workers included; ddprun never forwards
  // it. SIGTERM and SIGINT from it stop the workers (scancel, the time
  // limit: ddprun waits the grace period, then SIGKILLs); any other (the
  // early warning of --signal=SIG@T, scancel --signal) leaves them
  // training. SIGUSR1 and SIGUSR2 are handled even when not forwarded, so
  // that an early warning never kills ddprun (docs/multinode.md).
  bool underSlurm = false;
};

// Where the workers' output and the launch's records go.
struct OutputConfig {
  // Every launch writes under its own new directory
  // <logDir>/<run_id>_<random>/. Without logDir: a new temporary directory,
  // removed at exit unless keepLogs (redirects or tee write files there).
  std::optional<std::filesystem::path> logDir;
  bool keepLogs = false;
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> localRanksFilter;  // console shows only these
  // Console line prefix; ${rank}, ${local_rank}, ${role_name}, ${node_rank}
  // and ${hostname} are substituted. Empty: no prefix.
  std::string logPrefixTemplate = "[rank ${rank}]: ";
  WorkerTty tty = WorkerTty::kAuto;
  // --duplicate_std{out,err}_filters: tee'd lines containing any of these
  // also go to <attempt dir>/filtered_std{out,err}.log (all ranks).
  std::vector<std::string> duplicateStdoutFilters;
  std::vector<std::string> duplicateStderrFilters;
  EventLogConfig eventLog;
  // The launcher's own TORCHELASTIC_ERROR_FILE (set by a scheduler): the
  // root cause is written there in torchelastic's JSON format.
  std::optional<std::filesystem::path> launcherErrorFile;
};

struct AgentConfig {
  // The worker's argv: command[0] is an absolute path to an executable. The
  // literal "${local_rank}" in any argument is replaced per worker.
  std::vector<std::string> command;
  // A short name for the program, for reports ("train.py").
  std::string programName;

  int nprocPerNode = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string role = "default";
  std::string runId;
  std::string hostname;
  // MASTER_ADDR / MASTER_PORT given to workers (worker rank 0 hosts the
  // TCPStore of init_process_group there). Port 0: pick a free one.
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;

  RestartConfig restarts;
  SelfHealingConfig selfHealing;
  StopConfig stopping;
  OutputConfig output;
  // The program runs under Python (a .py script, -m, --run_path).
  bool pythonProgram = false;

  // --virtual_local_rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to
  // the worker's own device.
  bool virtualLocalRank = false;
  // --numa_binding: "node", "socket", "exclusive", "core-complex" or empty.
  std::string numaBinding;
  // The name under which NCCL async error handling is given to workers:
  // TORCH_NCCL_ASYNC_ERROR_HANDLING (PyTorch >= 2.2) or the older
  // NCCL_ASYNC_ERROR_HANDLING. Always set, as torchrun does (to the user's
  // value of either name, else 1); only this one of the two is added.
  std::string ncclAsyncErrorHandlingName = "TORCH_NCCL_ASYNC_ERROR_HANDLING";

  RendezvousConfig rendezvous;

  // true (default, as torchrun 2.x): workers' MASTER_ADDR:MASTER_PORT is the
  // agent's store (PyTorch clients speak its TCPStore dialect) and
  // TORCHELASTIC_USE_AGENT_STORE=True. false (torchrun 1.13's behaviour, and
  // always with a strict store): worker rank 0 hosts its own TCPStore on a
  // free port.
  bool useAgentStore = true;
  // The agent's store refuses PyTorch TCPStore clients (they carry no token).
  bool strictStore = false;
  // --store_relay: the workers' MASTER_ADDR:MASTER_PORT is this node's relay
  // (127.0.0.1), which carries their store traffic to the round's store over
  // one authenticated connection (docs/multinode.md, "The node relay").
  // The launcher decides (auto: jobs of several nodes on the agent store).
  bool relayWorkersStore = false;

  // --preload: Python workers are forked from a per-node zygote that
  // imported modules once instead of exec'd (command is then PYTHON -u
  // SCRIPT... or PYTHON -u -m MODULE...). kAuto (the default for Python
  // programs): torch and what the program imports, learned, each left out
  // when unsafe; kModules: exactly `preload`, refused when unsafe.
  PreloadMode preloadMode = PreloadMode::kOff;
  std::vector<std::string> preload;  // kModules

  // Extra environment set for every worker (after torchrun's variables are
  // computed, so these win). Used for OMP_NUM_THREADS and the like.
  std::map<std::string, std::string> extraEnv;
};

}  // namespace ddprun::agent
