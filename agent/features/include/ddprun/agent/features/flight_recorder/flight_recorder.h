// After a failed attempt: what PyTorch's flight recorder says of it
// (docs/operations.md, "Flight recorder").
//
// The workers dump their recorders into the attempt's flight_recorder
// folder (rank_<global rank>; NCCL on a collective timeout, or a program
// through torch's _dump_fr_trace). When that folder holds dumps, ddprun
// runs PyTorch's own analyser on it with the workers' Python
// (`python -m torch.distributed.flight_recorder.fr_trace DIR`, PyTorch
// 2.10 and later) and keeps its verdict: the ranks that never joined a
// collective the others waited in. Where the analyser is missing or fails
// on the dumps (2.13's fails on Gloo's: their process group has no name),
// each dump's last collective per process group says the same: the ranks
// whose last enqueued collective is behind the others' fell behind.
// The analysis runs with the workers' Python, at most 30 s each; its full
// output is kept as analysis.txt beside the dumps.
//
// Thread-safety: a free function; blocks up to a minute (two Python runs).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ddprun::agent {

struct FlightRecorderFindings {
  std::vector<int> dumpedRanks;  // ranks with a dump (empty: nothing to say)
  std::vector<int> behind;       // ranks that fell behind (empty: none found)
  std::string verdict;           // one line: what the analysis found
  std::string tool;              // "fr_trace" or "the dumps' last collectives"
};

// `python`: the workers' interpreter (empty: python3 on PATH).
FlightRecorderFindings analyzeFlightRecorder(const std::filesystem::path& dir,
                                             const std::string& python);

}  // namespace ddprun::agent
