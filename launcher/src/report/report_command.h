// `ddprun report`: what a finished (or running) run's failures cost, from
// the events its agents wrote in the run directory (docs/operations.md,
// "ddprun report").
//
//   ddprun report RUN_DIR [--html FILE]
//
// RUN_DIR: a run's --log_dir, one node's run directory in it, or an event
// log file. Prints the summary; with --html, also writes one
// self-contained HTML page.
//
// Thread-safety: runs on the calling thread.
#pragma once

namespace ddprun::launcher {

// `argv[1]` is "report". Returns 0, 1 when the page cannot be written, 2
// for bad options or nothing to read.
int runReportCommand(int argc, char** argv);

}  // namespace ddprun::launcher
