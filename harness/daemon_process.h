// Daemon: ddprun-rendezvous as a user runs it, a separate process on a free
// loopback port, for tests that drive the real binary.
//
// Thread-safety: one test thread.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.h"
#include "ddprun/rendezvous/store_client.h"

namespace ddprun::harness {

using namespace std::chrono_literals;

inline constexpr char kToken[] = "integration-secret";
inline const std::string kDaemon = std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous";

// A running daemon on a free port.
class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extraArgs = {},
                  std::map<std::string, std::string> env = {{"DDPRUN_TOKEN", kToken}}) {
    std::vector<std::string> argv = {kDaemon, "--host", "127.0.0.1", "--port", "0"};
    argv.insert(argv.end(), extraArgs.begin(), extraArgs.end());
    process_ = std::make_unique<ChildProcess>(argv, env);
    const auto line = process_->readStdoutLine(10s);
    if (!line || line->rfind("listening on 127.0.0.1:", 0) != 0) {
      throw std::runtime_error("the daemon did not print its address: " + line.value_or("") +
                               process_->stderrText());
    }
    port_ = static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  }

  std::uint16_t port() const { return port_; }
  ChildProcess& process() { return *process_; }

  rendezvous::StoreClientOptions clientOptions(const std::string& name = "test") const {
    rendezvous::StoreClientOptions options;
    options.port = port_;
    options.token = kToken;
    options.name = name;
    options.connectTimeout = 10s;
    options.requestTimeout = 10s;
    return options;
  }

  // The daemon's peak resident memory so far (VmHWM), in bytes; 0 if gone.
  std::size_t peakRssBytes() const {
    std::ifstream status("/proc/" + std::to_string(process_->pid()) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    return 0;
  }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::uint16_t port_ = 0;
};

}  // namespace ddprun::harness
