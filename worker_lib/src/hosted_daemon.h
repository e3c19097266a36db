// HostedDaemon: a ddprun-rendezvous child process that this process starts
// when nothing else hosts the job's store (spawn(), or rank 0 of a SLURM or
// torchrun job that ddprun did not launch). The daemon dies with this
// process (PDEATHSIG) and is stopped (SIGTERM, then reaped) on destruction.
//
// The binary is found in this order: $DDPRUN_RENDEZVOUS_BIN, beside the
// running executable, the build tree this library came from, the install
// prefix's bin directory, then $PATH.
//
// Thread-safety: not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ddprun::worker {

class HostedDaemon {
 public:
  // Starts the daemon on host:port (port 0 = any free port) with `token` in
  // its environment and waits for its "listening on" line. Throws
  // ConfigError when the binary is missing, NetworkError when it cannot
  // listen (the port is taken).
  HostedDaemon(const std::string& host, std::uint16_t port, const std::string& token);
  ~HostedDaemon();
  HostedDaemon(const HostedDaemon&) = delete;
  HostedDaemon& operator=(const HostedDaemon&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// The path of ddprun-rendezvous, or throws ConfigError saying where it looked.
std::string findRendezvousDaemon();

}  // namespace ddprun::worker
