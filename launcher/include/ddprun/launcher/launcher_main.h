// The body of the launcher's executables: `ddprun` and `ddprun-launch`
// (torch.distributed.launch's command line, LaunchOptions::legacyLaunch)
// share it. Parses the options, builds the agent's configuration and runs
// the agent; returns the exit code: the agent's (0, the root cause's code,
// or 128+N after signal N), or 2 for bad input.
//
// Thread-safety: call once, from main().
#pragma once

namespace ddprun::launcher {

enum class LauncherKind { kDdprun, kLegacyLaunch };

int launcherMain(int argc, char** argv, LauncherKind kind);

}  // namespace ddprun::launcher
