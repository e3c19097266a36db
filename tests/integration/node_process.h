// Node: one ddprun agent started by a multi-node test ("a node"), and
// everything it printed; startNode() runs `script` under /bin/sh on it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher_support.h"

namespace ddprun::harness {

using namespace std::chrono_literals;

// The token multi-node tests share (DDPRUN_TOKEN).
inline constexpr char kToken[] = "multinode-secret";

// One agent ("node"): its process and everything it printed.
struct Node {
  std::unique_ptr<ChildProcess> process;
  std::string out;
  std::string err;

  // Reads output until `pattern` has appeared `count` times in stdout (or
  // stderr) (bounded).
  bool waitFor(const std::string& pattern, int count = 1, std::chrono::seconds limit = 20s,
               bool inStderr = false) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      out += process->drainStdout();
      err += process->drainStderr();
      const std::string& text = inStderr ? err : out;
      int seen = 0;
      for (std::size_t pos = text.find(pattern); pos != std::string::npos;
           pos = text.find(pattern, pos + 1)) {
        ++seen;
      }
      if (seen >= count) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  std::optional<int> finish(std::chrono::seconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      out += process->drainStdout();
      err += process->drainStderr();
      if (auto code = process->wait(0ms)) {
        out += process->stdoutText();
        err += process->stderrText();
        return code;
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }
};

inline Node startNode(std::vector<std::string> options, const std::string& script,
                      std::map<std::string, std::string> env = {{"DDPRUN_TOKEN", kToken}}) {
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  env["OMP_NUM_THREADS"] = "1";
  return Node{std::make_unique<ChildProcess>(argv, env), "", ""};
}

}  // namespace ddprun::harness
