// Training-loop helpers every rank calls alike: metrics averaged over
// ranks, an early-stop decision taken by rank 0, and output from rank 0
// only (lines and a progress bar).
//
// Example:
//   double loss = meanOverRanks(*group, localLoss);          // NaN-skipping
//   printOnRankZero(*group, fmt::format("loss {:.4f}", loss));
//   if (stopDecision(*group, loss < target)) break;          // rank 0 decides
//
// Thread-safety: call from the training thread, in the same order on every
// rank (they are collectives).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::worker {

class ProcessGroup;

// The mean over ranks of each value, skipping NaN (a rank without samples
// reports NaN); NaN where every rank reported NaN.
std::vector<double> meanOverRanks(ProcessGroup& group, const std::vector<double>& values);
double meanOverRanks(ProcessGroup& group, double value);
// sum(sums) / sum(counts) over ranks: the exact mean when ranks hold
// different numbers of samples (exact evaluation).
double weightedMeanOverRanks(ProcessGroup& group, double sum, double count);

// Every rank returns rank 0's decision.
bool stopDecision(ProcessGroup& group, bool rankZeroDecision);

// Writes `line` (and a newline) to stdout on rank 0 only.
void printOnRankZero(const ProcessGroup& group, std::string_view line);

// A progress bar on rank 0's stderr: redrawn in place on a terminal,
// otherwise one line per 10 %. Silent on other ranks.
class ProgressBar {
 public:
  ProgressBar(const ProcessGroup& group, std::int64_t total, std::string label);
  void update(std::int64_t done, std::string_view suffix = {});
  void finish();

 private:
  bool active_;
  bool terminal_;
  std::int64_t total_;
  std::string label_;
  int lastDecile_ = -1;
};

}  // namespace ddprun::worker
