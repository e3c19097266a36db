// The environment contract between the ddprun agent and its workers.
//
// These names are the only thing (besides the store protocol) that the
// agent and the worker library share. docs/env.md documents each one; keep
// the two in step.
#pragma once

namespace ddprun::env {

// --- ddprun's own variables -------------------------------------------------
// Shared secret that authenticates store clients (never on argv, never logged).
inline constexpr char kToken[] = "DDPRUN_TOKEN";
// Log level for every ddprun component: trace, debug, info, warn, error, off.
inline constexpr char kLogLevel[] = "DDPRUN_LOG_LEVEL";

}  // namespace ddprun::env
