// ServerProcess: a store server run as a child process for one benchmark run.
//
// start() forks and execs the command with extra environment variables,
// waits for the first stdout line "listening on HOST:PORT" (the convention
// of ddprun-rendezvous, and of `ddprun-bench c10d-server`), and records the
// endpoint. stop() sends SIGTERM, waits up to a grace period for the exit,
// then SIGKILLs and reaps. The child gets PR_SET_PDEATHSIG, so a crashed
// benchmark leaves no server behind.
//
// Thread-safety: none; owned and used by the benchmark's main thread.
// Ownership: owns the child and the read end of its stdout; the destructor
// calls stop(). Not copyable.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::bench {

struct ServerCommand {
  std::string name;                                      // for messages, e.g. "ddprun-rendezvous"
  std::vector<std::string> argv;                         // argv[0] is the program's path
  std::vector<std::pair<std::string, std::string>> env;  // added or replaced
};

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Spawns `command` and waits up to `timeout` for its "listening on" line.
  // Throws ddprun::Error when it cannot start, exits, or says something else.
  void start(const ServerCommand& command,
             std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // SIGTERM, then SIGKILL after `grace`; reaps the child. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& host() const { return host_; }
  std::uint16_t port() const { return port_; }

 private:
  std::string readFirstLine(std::chrono::steady_clock::time_point deadline);
  // Waits for the child's exit until `deadline`; true once it is reaped.
  bool reap(std::chrono::steady_clock::time_point deadline);

  std::string name_;
  pid_t pid_ = -1;
  int stdoutFd_ = -1;
  int exitStatus_ = 0;
  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace ddprun::bench
