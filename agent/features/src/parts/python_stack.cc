#include "ddprun/agent/features/parts/python_stack.h"

#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "ddprun/common/command_output.h"

namespace ddprun::agent {

namespace {

constexpr std::size_t kMaxLines = 60;

// /proc/<pid>/<file> split at NUL bytes (cmdline, environ).
std::vector<std::string> procEntries(pid_t pid, const char* file) {
  std::ifstream in(fmt::format("/proc/{}/{}", pid, file), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> entries;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    entries.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return entries;
}

bool isPython(pid_t pid) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  return !ec && exe.filename().string().starts_with("python");
}

std::string executableIn(const std::filesystem::path& dir) {
  const auto candidate = dir / "py-spy";
  return ::access(candidate.c_str(), X_OK) == 0 ? candidate.string() : std::string();
}

}  // namespace

std::string findPySpy(pid_t pid) {
  const char* path = std::getenv("PATH");
  if (std::string found = findExecutable("py-spy", path != nullptr ? path : ""); !found.empty()) {
    return found;
  }
  // Beside the worker's program: a venv's bin/python or bin/nequip-train.
  const auto argv = procEntries(pid, "cmdline");
  if (!argv.empty() && argv[0].find('/') != std::string::npos) {
    std::filesystem::path program(argv[0]);
    if (program.is_relative()) {
      std::error_code ec;
      program = std::filesystem::read_symlink(fmt::format("/proc/{}/cwd", pid), ec) / program;
    }
    if (std::string found = executableIn(program.parent_path()); !found.empty()) return found;
  }
  for (const auto& entry : procEntries(pid, "environ")) {
    if (!entry.starts_with("VIRTUAL_ENV=")) continue;
    if (std::string found = executableIn(std::filesystem::path(entry.substr(12)) / "bin");
        !found.empty()) {
      return found;
    }
  }
  return "";
}

std::vector<std::string> pythonStack(pid_t pid) {
  std::vector<std::string> lines;
  if (!isPython(pid)) return lines;
  const std::string pySpy = findPySpy(pid);
  if (pySpy.empty()) {
    lines.push_back(
        "python: no py-spy to read its Python stack (looked on ddprun's PATH, beside the "
        "worker's program and in its VIRTUAL_ENV); `pip install py-spy` in the workers' "
        "environment puts it here");
    return lines;
  }
  const auto out = commandOutput({pySpy, "dump", "--pid", std::to_string(pid)},
                                 {std::chrono::milliseconds(10000), 64 * 1024, true});
  if (!out) {
    lines.push_back(fmt::format("python: {} could not be started", pySpy));
    return lines;
  }
  std::istringstream text(*out);
  std::string line;
  while (std::getline(text, line) && lines.size() < kMaxLines) {
    if (!line.empty()) lines.push_back("python: " + line);
  }
  if (lines.empty()) lines.push_back(fmt::format("python: {} dump printed nothing", pySpy));
  return lines;
}

}  // namespace ddprun::agent
