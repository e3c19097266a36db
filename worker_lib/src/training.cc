#include "ddprun/worker/training.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

std::vector<double> meanOverRanks(ProcessGroup& group, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  at::Tensor sums = at::zeros({2 * n}, at::kDouble);
  auto* data = sums.data_ptr<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(values[static_cast<std::size_t>(i)])) continue;
    data[i] = values[static_cast<std::size_t>(i)];
    data[n + i] = 1;
  }
  at::Tensor reduced = sums.to(at::Device(group.device()));
  group.allReduce(reduced, ReduceOp::kSum);
  reduced = reduced.cpu();
  const auto* out = reduced.data_ptr<double>();
  std::vector<double> means(values.size());
  for (std::int64_t i = 0; i < n; ++i) {
    means[static_cast<std::size_t>(i)] =
        out[n + i] > 0 ? out[i] / out[n + i] : std::numeric_limits<double>::quiet_NaN();
  }
  return means;
}

double meanOverRanks(ProcessGroup& group, double value) {
  return meanOverRanks(group, std::vector<double>{value}).front();
}

double weightedMeanOverRanks(ProcessGroup& group, double sum, double count) {
  at::Tensor totals = at::tensor({sum, count}, at::kDouble).to(at::Device(group.device()));
  group.allReduce(totals, ReduceOp::kSum);
  totals = totals.cpu();
  const auto* t = totals.data_ptr<double>();
  return t[1] > 0 ? t[0] / t[1] : std::numeric_limits<double>::quiet_NaN();
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
