// The benchmark's only contact with LibTorch: c10d::TCPStore (1.13's legacy
// server and client) as the reference store.
//
// tcp_store.cc is the one translation unit that includes a torch header; this
// header is torch-free so the rest of the bench compiles quickly.
//
// Thread-safety: connectTcpStore() may be called from many threads; each
// returned client belongs to the thread that uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "store_driver.h"

namespace ddprun::bench {

// A c10d::TCPStore client connected to the server at host:port.
std::unique_ptr<BenchClient> connectTcpStore(const std::string& host, std::uint16_t port);

// The body of `ddprun-bench c10d-server`: runs a c10d::TCPStore server on
// 127.0.0.1 with a port the OS picks, prints "listening on 127.0.0.1:PORT",
// and serves until SIGTERM or SIGINT. Returns the process exit code.
int runTcpStoreServer();

}  // namespace ddprun::bench
