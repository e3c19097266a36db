// pythonStack: the Python stack of a worker, for the hang report, read with
// py-spy (`py-spy dump --pid`, PyPI's sampling profiler: it reads the
// interpreter's memory, the worker is not touched and needs no change).
//
// py-spy is looked for on ddprun's PATH, then beside the worker's program
// (the directory of its argv[0]: a virtual environment's bin), then in the
// worker's VIRTUAL_ENV. Each stack line comes back prefixed "python: ". A
// Python worker without a py-spy to read it gets one line that says how to
// get one; a process that is not Python gets nothing.
//
// Thread-safety: a free function; blocks up to 10 s (py-spy's run).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::agent {

std::vector<std::string> pythonStack(pid_t pid);

// Where py-spy is for `pid` (see above); empty: nowhere.
std::string findPySpy(pid_t pid);

}  // namespace ddprun::agent
