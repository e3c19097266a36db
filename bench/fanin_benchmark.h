// FaninBenchmark: N worker ranks reaching a job's store at start-up, as
// PyTorch's init_process_group does against the agent store
// (TORCHELASTIC_USE_AGENT_STORE), measured against ddprun's store and a
// reference server in the same run: PyTorch's legacy TCPStore server
// (LibTorch 1.13) by default, or any command that prints "listening on
// HOST:PORT" (bench/tcpstore_server.py: the current PyTorch's libuv server).
//
// Each simulated rank, in the TCPStore protocol of PyTorch 1.13 (which both
// default servers speak) or, with FaninDialect::kV2, of PyTorch 2.2+ (VALIDATE
// and PING first, every later opcode one higher: what PyTorch 2.x servers
// require and what ddprun's store also serves): connect; ADD "init/" 1;
// rank 0 SETs its address, every other rank WAITs for it and GETs it; then a
// barrier: ADD the barrier key, the rank that brings it to N SETs "last",
// every rank WAITs for "last".
// (1.13's own barrier polls ADD 0 every 10 ms; this is 2.x's event-driven
// one, which asks less of the server.) The ranks are spread over a few
// client processes, each multiplexing its connections with epoll and
// keeping at most `window` connections that have not had their first reply,
// and bound to several loopback source addresses (127.0.0.1..8) so that
// 98,304 connections fit in the ephemeral-port range. Measured: the clock
// starts when the client processes are told to go and stops when the last
// rank's final WAIT is answered.
//
// Thread-safety: run from one thread (it forks the client processes).
#pragma once

#include <chrono>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "ddprun/rendezvous/node_relay.h"

namespace ddprun::bench {

// The TCPStore protocol the simulated ranks speak.
enum class FaninDialect {
  kV1,  // PyTorch 1.13/2.0: no handshake; SET 0, GET 2, ADD 3, WAIT 5
  kV2,  // PyTorch 2.2+: VALIDATE (0, magic) and PING (13) first; SET 1, GET 3, ADD 4, WAIT 6
};

struct FaninOptions {
  std::vector<int> ranks = {1024, 8192, 32768, 98304};
  int processes = 8;
  int sources = 8;
  int window = 128;  // per client process
  std::chrono::seconds limit{120};
  bool reference = true;  // also a reference server
  FaninDialect dialect = FaninDialect::kV1;
  // The reference server's command (argv[0] a path; it prints "listening on
  // HOST:PORT" and is started afresh for every run); empty: LibTorch 1.13's
  // server (`ddprun-bench c10d-server`), which speaks only kV1.
  std::vector<std::string> referenceCommand;
  std::string referenceName = "PyTorch TCPStore 1.13";  // its column in the table
  // > 0: the ranks reach the store through node relays, this many per
  // node (the agent's relay code, bench/relay_hosts.h), in two scenarios
  // (init_process_group, then NCCL's scalable init); then the flat path
  // at `flatRanks` for ddprun's store and the reference, side by side.
  int ranksPerNode = 0;
  int flatRanks = 16384;
  // NCCL's scalable init runs only at rank counts up to this: every rank
  // reads N/128 ids of 128 bytes (98,304 ranks: 9.6 GB to the ranks, more
  // than a 24 GiB machine holds in flight with the store and relays).
  int scalableMaxRanks = 32768;
  // The relays' ADD combining window: the agent's (RelayOptions::addWindow).
  std::chrono::microseconds addWindow = rendezvous::RelayOptions{}.addWindow;
};

struct FaninResult {
  std::string server;
  int ranks = 0;
  bool completed = false;
  double seconds = 0;
  int ranksDone = 0;
  bool skipped = false;           // more connections than one process may hold here
  std::string scenario = "init";  // "init", "scalable init" (NCCL's), or "flat"
  double serverCpuSeconds = 0;    // the store's user + system time in the run
  // Through relays only:
  int relays = 0;
  int relayProcesses = 0;
  double relayCpuSeconds = 0;
  std::uint64_t workerRequests = 0;
  std::uint64_t upstreamRequests = 0;
  std::uint64_t coalesced = 0;
  std::uint64_t addsCombined = 0;
  std::uint64_t bytesSaved = 0;
  long long listenOverflows = -1;  // while the relays connected
};

std::vector<FaninResult> runFaninBenchmark(const FaninOptions& options,
                                           const std::filesystem::path& daemonPath,
                                           const std::filesystem::path& benchPath,
                                           std::ostream& log);

void printFaninTable(const std::vector<FaninResult>& results, const FaninOptions& options,
                     std::ostream& out);

// The relay runs (FaninOptions::ranksPerNode > 0) and the flat comparison.
std::vector<FaninResult> runRelayFaninBenchmark(const FaninOptions& options,
                                                const std::filesystem::path& daemonPath,
                                                std::ostream& log);
void printRelayFaninTable(const std::vector<FaninResult>& results, const FaninOptions& options,
                          std::ostream& out);

}  // namespace ddprun::bench
