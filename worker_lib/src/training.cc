#include "ddprun/worker/training.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Element-wise sums over ranks, through a float64 tensor on the group's device.
std::vector<double> sumOverRanks(ProcessGroup& group, const std::vector<double>& values) {
  at::Tensor sums = at::tensor(values, at::kDouble).to(at::Device(group.device()));
  group.allReduce(sums, ReduceOp::kSum);
  sums = sums.cpu();
  const auto* data = sums.data_ptr<double>();
  return std::vector<double>(data, data + values.size());
}

double ratio(double sum, double count) { return count > 0 ? sum / count : kNaN; }

}  // namespace

std::vector<double> meanOverRanks(ProcessGroup& group, const std::vector<double>& values) {
  // [value or 0, ..., 1 or 0 (counted), ...]
  const std::size_t n = values.size();
  std::vector<double> sumsAndCounts(2 * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(values[i])) continue;
    sumsAndCounts[i] = values[i];
    sumsAndCounts[n + i] = 1;
  }
  const auto totals = sumOverRanks(group, sumsAndCounts);
  std::vector<double> means(n);
  for (std::size_t i = 0; i < n; ++i) means[i] = ratio(totals[i], totals[n + i]);
  return means;
}

double meanOverRanks(ProcessGroup& group, double value) {
  return meanOverRanks(group, std::vector<double>{value}).front();
}

double weightedMeanOverRanks(ProcessGroup& group, double sum, double count) {
  const auto totals = sumOverRanks(group, {sum, count});
  return ratio(totals[0], totals[1]);
}

bool stopDecision(ProcessGroup& group, bool rankZeroDecision) {
  return group.broadcastFlag(rankZeroDecision, 0);
}

void printOnRankZero(const ProcessGroup& group, std::string_view line) {
  if (group.rank() != 0) return;
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

ProgressBar::ProgressBar(const ProcessGroup& group, std::int64_t total, std::string label)
    : active_(group.rank() == 0),
      terminal_(::isatty(STDERR_FILENO) == 1),
      total_(total > 0 ? total : 1),
      label_(std::move(label)) {}

void ProgressBar::update(std::int64_t done, std::string_view suffix) {
  if (!active_) return;
  const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld %.*s\x1b[K", label_.c_str(),
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_),
                 static_cast<int>(suffix.size()), suffix.data());
  } else {
    const int decile = static_cast<int>(fraction * 10);
    if (decile == lastDecile_) return;
    lastDecile_ = decile;
    std::fprintf(stderr, "%s %3d%% %lld/%lld %.*s\n", label_.c_str(), decile * 10,
                 static_cast<long long>(done), static_cast<long long>(total_),
                 static_cast<int>(suffix.size()), suffix.data());
  }
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (active_ && terminal_) std::fputc('\n', stderr);
}

}  // namespace ddprun::worker
