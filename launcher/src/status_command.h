// `ddprun status`: a running job's rendezvous as an operator sees it - the
// round, its members (address, group rank, workers), restarts used and
// the last failure - from the job's store or from etcd, as a table or as
// JSON for tools (docs/operations.md).
//
//   ddprun status --rdzv_endpoint=H:P --rdzv_id=ID [--rdzv_backend=c10d|etcd]
//                 [--rdzv_conf=token_file=...|protocol=https,...] [--json]
//
// Thread-safety: runs on the calling thread.
#pragma once

namespace ddprun::launcher {

// `argv[1]` is "status". Returns the exit code: 0 when the rendezvous
// exists, 1 when it does not or cannot be reached, 2 for bad options.
int runStatusCommand(int argc, char** argv);

}  // namespace ddprun::launcher
