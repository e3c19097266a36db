#include "ddprun/agent/features/flight_recorder/flight_recorder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "ddprun/common/command_output.h"

namespace ddprun::agent {

namespace {

constexpr std::chrono::seconds kAnalysisLimit{30};

// The dumps' last collectives, where fr_trace cannot say: per process
// group, "<group> <rank> <last enqueued> <last completed>" lines from each
// dump's pg_status (a pickle, as PyTorch writes it).
constexpr char kLastCollectives[] = R"py(
import glob, os, pickle, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "rank_*"))):
    try:
        rank = int(path.rsplit("_", 1)[1])
        with open(path, "rb") as f:
            dump = pickle.load(f)
    except Exception as e:
        print(f"unreadable {os.path.basename(path)}: {e}")
        continue
    for group, status in sorted(dump.get("pg_status", {}).items()):
        print(f"last {group} {rank} {status.get('last_enqueued_collective', -1)} "
              f"{status.get('last_completed_collective', -1)}")
)py";

std::vector<int> ranksIn(const std::string& set) {  // "{1, 3}" -> 1, 3
  std::vector<int> ranks;
  std::smatch m;
  std::string rest = set;
  while (std::regex_search(rest, m, std::regex(R"(\d+)"))) {
    ranks.push_back(std::stoi(m.str()));
    rest = m.suffix();
  }
  return ranks;
}

std::string rankList(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
}

}  // namespace

FlightRecorderFindings analyzeFlightRecorder(const std::filesystem::path& dir,
                                             const std::string& python) {
  FlightRecorderFindings findings;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("rank_") && name.size() > 5 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos) {
      findings.dumpedRanks.push_back(std::stoi(name.substr(5)));
    }
  }
  if (findings.dumpedRanks.empty()) return findings;
  std::sort(findings.dumpedRanks.begin(), findings.dumpedRanks.end());
  const char* path = std::getenv("PATH");
  const std::string interpreter =
      !python.empty() ? python : findExecutable("python3", path != nullptr ? path : "");
  std::ofstream analysis(dir / "analysis.txt", std::ios::trunc);
  if (interpreter.empty()) {
    findings.verdict = "no Python to analyse the dumps with";
    return findings;
  }
  const CommandLimits limits{kAnalysisLimit, 256 * 1024, true};
  // PyTorch's analyser first.
  const auto frTrace =
      commandOutput({interpreter, "-m", "torch.distributed.flight_recorder.fr_trace",
                     "--allow-incomplete-ranks", "-p", "rank_", dir.string()},
                    limits);
  if (frTrace) {
    analysis << "$ python -m torch.distributed.flight_recorder.fr_trace --allow-incomplete-ranks "
                "-p rank_ "
             << dir.string() << "\n"
             << *frTrace << "\n";
    std::smatch m;
    if (std::regex_search(*frTrace, m, std::regex(R"(missing ranks: (\{[0-9, ]*\}))"))) {
      findings.behind = ranksIn(m[1].str());
      findings.tool = "fr_trace";
      std::smatch seq;
      const std::string where =
          std::regex_search(*frTrace, seq, std::regex(R"(sequence number: (\d+))"))
              ? fmt::format(" (collective #{})", seq[1].str())
              : std::string();
      findings.verdict = fmt::format("{} never joined a collective the others waited in{}",
                                     rankList(findings.behind), where);
      return findings;
    }
  }
  // The dumps' own last collectives.
  const auto last = commandOutput({interpreter, "-c", kLastCollectives, dir.string()}, limits);
  if (last) analysis << "$ the dumps' last collectives\n" << *last << "\n";
  findings.tool = "the dumps' last collectives";
  // group -> rank -> last enqueued
  std::map<std::string, std::map<int, long long>> enqueued;
  std::istringstream lines(last.value_or(""));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string tag, group;
    int rank = 0;
    long long lastEnqueued = 0;
    if (words >> tag >> group >> rank >> lastEnqueued && tag == "last") {
      enqueued[group][rank] = lastEnqueued;
    }
  }
  for (const auto& [group, byRank] : enqueued) {
    long long lowest = byRank.begin()->second, highest = lowest;
    for (const auto& [rank, seq] : byRank) {
      lowest = std::min(lowest, seq);
      highest = std::max(highest, seq);
    }
    if (lowest == highest) continue;
    std::vector<int> behind;
    for (const auto& [rank, seq] : byRank) {
      if (seq == lowest) behind.push_back(rank);
    }
    findings.behind = behind;
    findings.verdict =
        fmt::format("{} stopped at collective #{} of process group {} while the others reached #{}",
                    rankList(behind), lowest, group, highest);
    return findings;
  }
  findings.verdict = frTrace ? "no rank fell behind in the dumps"
                             : "the dumps could not be analysed (see analysis.txt)";
  return findings;
}

}  // namespace ddprun::agent
