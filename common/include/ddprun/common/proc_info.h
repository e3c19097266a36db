// What ddprun reads about a process from /proc: its stat line (state,
// parent, process group, CPU time), one-line files (comm, wchan) and its
// I/O byte counters. One parser for its several readers (the workers' group
// and orphan guard, the zygote, the hang watchdog and D-state watch, the
// benchmarks' CPU accounting).
//
// Thread-safety: pure functions; a process may vanish between two reads,
// which they report as nullopt / empty / 0.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddprun {

struct ProcStat {
  char state = '?';  // R, S, D, T, Z, ...
  pid_t parent = 0;
  pid_t processGroup = 0;
  // utime + stime + cutime + cstime: its own CPU time and that of the
  // children it reaped, in clock ticks.
  std::uint64_t cpuTicks = 0;
};

std::optional<ProcStat> readProcStat(pid_t pid);
// The first line of /proc/<pid>/<file> ("comm", "wchan"), or "".
std::string readProcLine(pid_t pid, const char* file);
// What /proc/<pid>/io counts, summed: rchar + wchar (bytes read and written
// through any descriptor) and read_bytes + write_bytes (bytes it made the
// storage layer fetch or dirtied, which also counts I/O through a memory
// map that the descriptor counters miss); 0 when unreadable.
std::uint64_t readProcIoBytes(pid_t pid);

}  // namespace ddprun
