// Helpers for driving the real ddprun binary in integration tests.
#pragma once

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "scratch_folder.h"
#include "unused_port.h"

namespace ddprun::harness {

inline const std::string kBinDir = DDPRUN_BIN_DIR;
inline const std::string kDdprun = kBinDir + "/ddprun";

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` to completion (bounded by `timeout`).
inline RunResult runCommand(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env,
                            std::chrono::milliseconds timeout) {
  ChildProcess process(argv, env);
  RunResult result;
  // Read both pipes while waiting so a chatty run never blocks on them.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    result.out += process.drainStdout();
    result.err += process.drainStderr();
    if (auto code = process.wait(std::chrono::milliseconds(0))) {
      result.code = *code;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.out += process.stdoutText();
  result.err += process.stderrText();
  return result;
}

// Runs ddprun with `args` to completion (bounded by `timeout`).
inline RunResult runDdprun(const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env = {},
                           std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), args.begin(), args.end());
  return runCommand(argv, env, timeout);
}

// True when `pid` no longer runs (gone, or a zombie waiting to be reaped).
inline bool processGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'Z';
}

// True when `pid` is gone within `limit`.
inline bool goneWithin(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!processGone(pid) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return processGone(pid);
}

// One node of runTwoStaticNodes: its exit code (none: it did not end in
// time) and output.
struct NodeResult {
  std::optional<int> code;
  std::string out;
  std::string err;
};

// Runs `script` on two static nodes of 2 workers each (127.0.0.1 and
// 127.0.0.2, --max_restarts=1, no log prefix) under `python`, plus
// `extraArgs` on both, and waits for both (2 minutes at most).
inline std::vector<NodeResult> runTwoStaticNodes(const std::filesystem::path& script,
                                                 const std::string& python,
                                                 const std::vector<std::string>& extraArgs) {
  const std::uint16_t port = freePort();
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv = {kDdprun,
                                     "--nproc_per_node=2",
                                     "--nnodes=2",
                                     "--node_rank=" + std::to_string(rank),
                                     "--master_addr=127.0.0.1",
                                     "--master_port=" + std::to_string(port),
                                     "--local_addr=127.0.0." + std::to_string(rank + 1),
                                     "--max_restarts=1",
                                     "--log_prefix="};
    argv.insert(argv.end(), extraArgs.begin(), extraArgs.end());
    argv.push_back(script.string());
    nodes.push_back(std::make_unique<ChildProcess>(
        argv, std::map<std::string, std::string>{{"PYTHON_EXEC", python}, {"DDPRUN_TOKEN", ""}}));
  }
  std::vector<NodeResult> results;
  for (auto& node : nodes) {
    NodeResult result;
    result.code = node->wait(std::chrono::seconds(120));
    result.out = node->stdoutText();
    result.err = node->stderrText();
    results.push_back(std::move(result));
  }
  return results;
}

// The whole text of `path` ("" when it does not exist).
inline std::string readText(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `text` in the file `name` of `dir`; its path.
inline std::filesystem::path writeScript(const std::filesystem::path& dir, const std::string& name,
                                         const std::string& text) {
  const std::filesystem::path path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// The Python of the Python-worker tests: DDPRUN_TEST_PYTHON (the current
// PyTorch's virtual environment, for the TorchCurrent copies), else Debian's.
inline std::string testPython() {
  const char* python = std::getenv("DDPRUN_TEST_PYTHON");
  return python != nullptr && *python != '\0' ? python : "/usr/bin/python3";
}

inline std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

inline std::vector<std::string> args(std::vector<std::string> options,
                                     const std::vector<std::string>& program) {
  options.insert(options.end(), program.begin(), program.end());
  return options;
}

// The directory one launch with run id `runId` created under `logDir`
// (<runId>_<random>); empty when there is not exactly one.
inline std::filesystem::path launchDir(const std::filesystem::path& logDir,
                                       const std::string& runId) {
  std::filesystem::path found;
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(logDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == runId.size() + 7 && name.starts_with(runId + "_")) {
      found = entry.path();
      ++count;
    }
  }
  return count == 1 ? found : std::filesystem::path();
}

inline std::vector<std::string> linesWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) lines.push_back(line.substr(prefix.size()));
    start = end + 1;
  }
  return lines;
}

// Starts ddprun, waits (up to `timeout`) until its workers wrote `expected`
// "<pid>" lines to `pidFile`; `pids` holds what was read.
inline std::unique_ptr<ChildProcess> startAndWait(
    const std::vector<std::string>& ddprunArgs, const std::filesystem::path& pidFile,
    std::size_t expected, std::vector<pid_t>& pids,
    const std::map<std::string, std::string>& env = {},
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), ddprunArgs.begin(), ddprunArgs.end());
  auto process = std::make_unique<ChildProcess>(argv, env);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(pidFile);
    pids.clear();
    pid_t pid = 0;
    while (in >> pid) pids.push_back(pid);
    if (pids.size() >= expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return process;
}

}  // namespace ddprun::harness
