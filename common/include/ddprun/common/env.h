// The environment contract between the ddprun agent and its workers.
//
// These names are the only thing (besides the store protocol) that the
// agent and the worker library share. docs/env.md documents each one; keep
// the two in step.
#pragma once

namespace ddprun::env {

// --- torchrun's worker variables (set by the agent for every worker) -------
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
inline constexpr char kNcclAsyncErrorHandling[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr char kNcclAsyncErrorHandlingOld[] = "NCCL_ASYNC_ERROR_HANDLING";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
// The signals the launcher forwards (torchrun 2.x sets it on itself, so
// workers inherit it): "SIGTERM,SIGINT,...".
inline constexpr char kSignalsToHandle[] = "TORCHELASTIC_SIGNALS_TO_HANDLE";
// PyTorch's flight recorder (docs/operations.md, "Flight recorder"): set for
// every worker unless the user set them or their newer names (2.8+:
// TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE; 2.15: TORCH_FR_DUMP_ON_TIMEOUT).
inline constexpr char kFlightRecorderBuffer[] = "TORCH_NCCL_TRACE_BUFFER_SIZE";
inline constexpr char kFlightRecorderBufferNew[] = "TORCH_FR_BUFFER_SIZE";
inline constexpr char kFlightRecorderDumpOnTimeout[] = "TORCH_NCCL_DUMP_ON_TIMEOUT";
inline constexpr char kFlightRecorderDumpOnTimeoutNew[] = "TORCH_FR_DUMP_ON_TIMEOUT";
inline constexpr char kFlightRecorderDumpFile[] = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
inline constexpr char kFlightRecorderDumpFileNew[] = "TORCH_FR_DUMP_TEMP_FILE";
// Read by the launcher (torchrun 2.13+): seconds a worker may stay in D state.
inline constexpr char kUninterruptibleStateTimeout[] = "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT";

// --- read by the launcher --------------------------------------------------
inline constexpr char kPythonExec[] = "PYTHON_EXEC";
inline constexpr char kLogLinePrefixTemplate[] = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
// The interface Gloo's and NCCL's sockets use: set (when the user has not)
// in multi-node jobs to the interface of this node's rendezvous address.
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";

// --- ddprun's own variables -------------------------------------------------
// Shared secret that authenticates store clients (never on argv, never logged).
inline constexpr char kToken[] = "DDPRUN_TOKEN";
// Log level for every ddprun component: trace, debug, info, warn, error, off.
inline constexpr char kLogLevel[] = "DDPRUN_LOG_LEVEL";
// Where workers reach the agent's store natively (with kToken).
inline constexpr char kStoreHost[] = "DDPRUN_STORE_HOST";
inline constexpr char kStorePort[] = "DDPRUN_STORE_PORT";
// Key prefix of the current attempt, so a restarted attempt never reads the
// keys of the previous one ("<run_id>/attempt_<n>/").
inline constexpr char kStorePrefix[] = "DDPRUN_STORE_PREFIX";
// The node's hostname as the agent reports it (for logs and reports).
inline constexpr char kHostname[] = "DDPRUN_HOSTNAME";
// Seconds between rendezvous progress lines when stderr is not a terminal
// (default 10; 0: none).
inline constexpr char kProgressInterval[] = "DDPRUN_PROGRESS_INTERVAL";
// The named pipe a worker reports its progress to (its process group
// formed, its training steps): one JSON line per report,
// {"pid": P, "event": "process_group"|"step", "step": N}. Set by the agent.
inline constexpr char kProgressPipe[] = "DDPRUN_PROGRESS_PIPE";
// 0: no progress hook on the Python workers' path (read by the launcher).
inline constexpr char kProgressHook[] = "DDPRUN_PROGRESS_HOOK";
// --preload auto: the file the progress hook of local rank 0 writes, at its
// first step, the modules the program imported from outside its own
// directory into (one name a line), then reports {"event": "imports"} on
// the progress pipe. Set by the agent in the zygote's environment only (the
// hook reads it there); the file is written once a launch.
inline constexpr char kPreloadLearn[] = "DDPRUN_PRELOAD_LEARN";

}  // namespace ddprun::env
