#include "ddprun/common/proc_info.h"

#include <fstream>
#include <sstream>
#include <string_view>

namespace ddprun {

namespace {

std::string procPath(pid_t pid, std::string_view file) {
  return "/proc/" + std::to_string(pid) + "/" + std::string(file);
}

}  // namespace

std::optional<ProcStat> readProcStat(pid_t pid) {
  std::ifstream file(procPath(pid, "stat"));
  std::string text;
  if (!std::getline(file, text)) return std::nullopt;
  const auto close = text.rfind(')');  // the name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime
  ProcStat stat;
  std::string skip;
  std::uint64_t utime = 0, stime = 0, cutime = 0, cstime = 0;
  fields >> stat.state >> stat.parent >> stat.processGroup;
  for (int i = 0; i < 8; ++i) fields >> skip;
  fields >> utime >> stime >> cutime >> cstime;
  if (!fields) return std::nullopt;
  stat.cpuTicks = utime + stime + cutime + cstime;
  return stat;
}

std::string readProcLine(pid_t pid, const char* file) {
  std::ifstream in(procPath(pid, file));
  std::string line;
  std::getline(in, line);
  return line;
}

std::uint64_t readProcIoBytes(pid_t pid) {
  std::ifstream file(procPath(pid, "io"));
  std::string key;
  std::uint64_t value = 0, total = 0;
  while (file >> key >> value) {
    if (key == "rchar:" || key == "wchar:" || key == "read_bytes:" || key == "write_bytes:") {
      total += value;
    }
  }
  return total;
}

}  // namespace ddprun
