// ddprun-rendezvous: the standalone store daemon.
//
//   DDPRUN_TOKEN=secret ddprun-rendezvous --host 0.0.0.0 --port 29400
//
// Serves until SIGINT or SIGTERM, then exits 0. With --port 0 the OS picks
// the port; the first line on stdout is always "listening on HOST:PORT".
// The token comes from DDPRUN_TOKEN or --token-file, never from argv;
// --open serves without one (as torchrun's store does), saying so once.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/version.h"
#include "ddprun/rendezvous/store_server.h"

namespace {

using ddprun::rendezvous::StoreServer;
using ddprun::rendezvous::StoreServerOptions;

// Lets one daemon hold as many connections as the hard limit allows.
void raiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

std::string loadToken(const std::string& tokenFile, bool open) {
  if (!tokenFile.empty()) return ddprun::readTokenFile(tokenFile);
  if (auto token = ddprun::tokenFromEnv(ddprun::env::kToken)) return *token;
  if (open) return "";
  throw ddprun::ConfigError(
      "no token: set DDPRUN_TOKEN in the environment or pass --token-file FILE (the token is "
      "never taken from the command line), or pass --open to serve every client without one");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddprun-rendezvous: the ddprun key-value store and rendezvous daemon"};
  StoreServerOptions options;
  options.host = "0.0.0.0";
  std::string tokenFile;
  bool open = false;
  double idleSeconds = 3600;
  double handshakeSeconds = 10;
  double maxWaitSeconds = 7200;
  app.set_version_flag("--version", ddprun::versionText("ddprun-rendezvous"));
  app.add_option("--host", options.host, "IP address to listen on")->capture_default_str();
  app.add_option("--metrics_port,--metrics-port", options.metricsPort,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (0: a free port, printed)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics_host,--metrics-host", options.metricsHost,
                 "IP address of the metrics endpoint (default: --host)");
  app.add_option("--port", options.port, "TCP port (0: pick a free port and print it)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--token-file", tokenFile,
                 "file holding the shared token (default: the DDPRUN_TOKEN variable)")
      ->check(CLI::ExistingFile);
  app.add_option("--trusted-address", options.trustedAddresses,
                 "an address whose silent connections (PyTorch 1.13's callback sockets) may stay "
                 "open without a handshake; repeat for more (addresses with an authenticated "
                 "client connected are trusted anyway)")
      ->check(
          [](const std::string& address) -> std::string {
            unsigned char bytes[16];
            return ::inet_pton(AF_INET, address.c_str(), bytes) == 1 ||
                           ::inet_pton(AF_INET6, address.c_str(), bytes) == 1
                       ? ""
                       : "'" + address + "' is not an IP address (give e.g. 10.0.0.7)";
          },
          "IP address");
  app.add_flag("--open", open,
               "without DDPRUN_TOKEN or --token-file: serve every client unauthenticated, as "
               "torchrun's store does (for agents run without a token)");
  // Every number has a range, so no duration overflows and none is zero
  // where zero would mean a busy loop.
  app.add_option("--idle-timeout", idleSeconds,
                 "seconds before an idle connection is closed (0: never)")
      ->check(CLI::Range(0.0, 30.0 * 86400))
      ->capture_default_str();
  app.add_option("--handshake-timeout", handshakeSeconds,
                 "seconds a new connection has to prove itself (authenticate, or a first "
                 "TCPStore request)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--max-wait", maxWaitSeconds,
                 "the longest any GET/WAIT lasts, whatever timeout the client asked for")
      ->check(CLI::Range(1.0, 7.0 * 86400))
      ->capture_default_str();
  app.add_flag("--strict", options.strict,
               "refuse PyTorch TCPStore clients (they cannot send the token); by default they "
               "are served on the same port without authentication");
  // A value must fit a reply frame (32-bit sizes) with room to spare.
  app.add_option("--max-value-bytes", options.limits.maxValueBytes, "largest value accepted")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-store-bytes", options.maxTotalBytes,
                 "total bytes held: keys, values (plus 64 bytes per key) and waiters")
      ->check(CLI::Range(std::size_t{1} << 20, std::size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-buffered-bytes", options.maxBufferedBytes,
                 "total bytes all connections may buffer beyond the stored data (input, "
                 "requests being received, replies, pending waits)")
      ->check(CLI::Range(std::size_t{1} << 20, std::size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-connections", options.maxConnections, "connections held at once")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--max-connections-per-address", options.maxConnectionsPerAddress,
                 "connections held at once from one address")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, like every ddprun command; --help exits 0.
    return app.exit(e) == 0 ? 0 : 2;
  }

  ddprun::initLogging("rendezvous");
  options.idleTimeout = std::chrono::milliseconds(static_cast<std::int64_t>(idleSeconds * 1000));
  options.handshakeTimeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(handshakeSeconds * 1000));
  options.maxWaitTime = std::chrono::milliseconds(static_cast<std::int64_t>(maxWaitSeconds * 1000));
  options.limits.maxFrameBytes =
      std::max(options.limits.maxFrameBytes, options.limits.maxValueBytes + 4096);
  options.maxUnproven = std::min(options.maxUnproven, options.maxConnections);

  // Signals are taken synchronously by this thread; block them first so the
  // server's thread never receives them.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  raiseDescriptorLimit();

  try {
    options.token = loadToken(tokenFile, open);
    StoreServer server(options);
    if (options.token.empty()) {
      std::cerr << "ddprun-rendezvous: notice: the store is open (--open, no DDPRUN_TOKEN or "
                   "--token-file): any process that reaches it can read and change every job's "
                   "keys; export DDPRUN_TOKEN on it and on every agent to protect it\n";
    }
    std::cout << "listening on " << options.host << ":" << server.port() << std::endl;
    if (server.metricsPort() != 0) {
      std::cout << "metrics on http://"
                << (options.metricsHost.empty() ? options.host : options.metricsHost) << ":"
                << server.metricsPort() << "/metrics" << std::endl;
    }
    server.start();
    int signal = 0;
    sigwait(&stopSignals, &signal);
    DDPRUN_INFO("The store server received {} and is shutting down.",
                signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
    return 0;
  } catch (const ddprun::ConfigError& e) {
    std::cerr << "ddprun-rendezvous: error: " << e.what() << "\n";
    return 2;
  } catch (const ddprun::Error& e) {
    std::cerr << "ddprun-rendezvous: error: " << e.what() << "\n";
    return 1;
  }
}
