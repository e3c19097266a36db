#include "ddprun/common/slurm.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "ddprun/common/error.h"

namespace ddprun {
namespace {

constexpr std::string_view kHostlistHint =
    "a hostlist looks like node[01-04,7],gpu-a3 (compare with `scontrol show hostnames`)";
// More digits than this could overflow 64 bits; no host number is that long.
constexpr std::size_t kMaxNumberDigits = 18;

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Top-level separators: SLURM's hostlist_create() splits at ',', ' ' and
// '\t'; the other whitespace is added so that newline-separated lists work.
bool isSeparator(char c) { return c == ',' || isSpace(c); }

bool isDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

[[noreturn]] void badEntry(std::string_view entry, std::string_view reason) {
  throw ConfigError(fmt::format("bad hostlist entry '{}': {}; {}", entry, reason, kHostlistHint));
}

// One "lo-hi" (or a single number, lo == hi) inside brackets.
struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  int width = 0;  // digits written in lo: the zero padding of every number
  std::uint64_t count() const { return hi - lo + 1; }
};

// A parsed entry: literals[0] group[0] literals[1] group[1] ... literals[n].
struct Entry {
  std::string_view text;
  std::vector<std::string> literals;
  std::vector<std::vector<Range>> groups;
};

std::uint64_t parseBound(std::string_view entry, std::string_view part, std::string_view digits) {
  if (!isDigits(digits)) {
    badEntry(entry, fmt::format("'{}' is not a number or a range lo-hi of numbers", part));
  }
  if (digits.size() > kMaxNumberDigits) {
    badEntry(entry, fmt::format("the number '{}' is too large", digits));
  }
  std::uint64_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<std::uint64_t>(c - '0');
  return value;
}

// Parses the text between '[' and ']': comma-separated numbers and ranges.
std::vector<Range> parseGroup(std::string_view entry, std::string_view body) {
  if (body.empty()) badEntry(entry, "'[]' holds no numbers");
  std::vector<Range> ranges;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = body.find(',', start);
    const std::string_view part = body.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (part.empty()) badEntry(entry, fmt::format("'[{}]' has an empty range", body));
    if (std::any_of(part.begin(), part.end(), isSpace)) {
      badEntry(entry, fmt::format("'[{}]' contains whitespace", body));
    }
    if (part.find('x') != std::string_view::npos) {
      badEntry(entry, fmt::format("'{}' is a multi-dimensional (BlueGene) box, which is not "
                                  "supported",
                                  part));
    }
    const std::size_t dash = part.find('-');
    const std::string_view loText = part.substr(0, dash);
    const std::string_view hiText = dash == std::string_view::npos ? loText : part.substr(dash + 1);
    if (loText.empty()) {
      badEntry(entry, fmt::format("'{}' has no start (negative numbers are not allowed)", part));
    }
    if (hiText.empty()) badEntry(entry, fmt::format("the range '{}' has no end", part));
    Range range;
    range.lo = parseBound(entry, part, loText);
    range.hi = parseBound(entry, part, hiText);
    range.width = static_cast<int>(loText.size());
    if (range.lo > range.hi) {
      badEntry(entry, fmt::format("the range '{}' is reversed ({} > {}); write the smaller number "
                                  "first",
                                  part, range.lo, range.hi));
    }
    ranges.push_back(range);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

Entry parseEntry(std::string_view text) {
  Entry entry;
  entry.text = text;
  std::string literal;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ']') badEntry(text, fmt::format("']' at offset {} has no matching '['", i));
    if (c != '[') {
      literal += c;
      ++i;
      continue;
    }
    const std::size_t close = text.find_first_of("[]", i + 1);
    if (close == std::string_view::npos) {
      badEntry(text, fmt::format("'[' at offset {} is never closed", i));
    }
    if (text[close] == '[') badEntry(text, fmt::format("'[' at offset {} is nested", close));
    entry.groups.push_back(parseGroup(text, text.substr(i + 1, close - i - 1)));
    entry.literals.push_back(std::move(literal));
    literal.clear();
    i = close + 1;
  }
  entry.literals.push_back(std::move(literal));
  return entry;
}

// Splits at top-level separators; separators inside brackets do not split.
// Bracket errors are left to parseEntry, which names them precisely.
std::vector<std::string_view> splitEntries(std::string_view list) {
  std::vector<std::string_view> entries;
  std::size_t i = 0;
  while (i < list.size()) {
    if (isSeparator(list[i])) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    int depth = 0;
    while (i < list.size() && (depth > 0 || !isSeparator(list[i]))) {
      if (list[i] == '[') ++depth;
      if (list[i] == ']') --depth;
      ++i;
    }
    entries.push_back(list.substr(start, i - start));
  }
  return entries;
}

// Hosts an entry expands to, or kMaxHostlistHosts + 1 once over the limit
// (so the caller never multiplies into an overflow).
std::uint64_t countHosts(const Entry& entry) {
  constexpr std::uint64_t kOver = kMaxHostlistHosts + 1;
  std::uint64_t product = 1;
  for (const auto& group : entry.groups) {
    std::uint64_t sum = 0;
    for (const Range& range : group) {
      if (range.count() >= kOver) return kOver;
      sum += range.count();
      if (sum >= kOver) return kOver;
    }
    product *= sum;
    if (product >= kOver) return kOver;
  }
  return product;
}

void appendHosts(const Entry& entry, std::vector<std::string>& hosts) {
  // Each group's numbers, already padded.
  std::vector<std::vector<std::string>> numbers;
  for (const auto& group : entry.groups) {
    std::vector<std::string> formatted;
    for (const Range& range : group) {
      for (std::uint64_t n = range.lo;; ++n) {
        formatted.push_back(fmt::format("{:0{}}", n, range.width));
        if (n == range.hi) break;
      }
    }
    numbers.push_back(std::move(formatted));
  }
  // An odometer over the groups, the last group turning fastest.
  std::vector<std::size_t> digit(numbers.size(), 0);
  while (true) {
    std::string host = entry.literals[0];
    for (std::size_t g = 0; g < numbers.size(); ++g) {
      host += numbers[g][digit[g]];
      host += entry.literals[g + 1];
    }
    hosts.push_back(std::move(host));
    std::size_t g = numbers.size();
    while (g > 0 && ++digit[g - 1] == numbers[g - 1].size()) {
      digit[g - 1] = 0;
      --g;
    }
    if (g == 0) return;
  }
}

// --- SLURM environment --------------------------------------------------

using Env = std::map<std::string, std::string>;

// The first of `names` that is set to a non-empty value: {name, value}.
std::optional<std::pair<std::string_view, std::string>> firstSet(
    const Env& vars, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    const auto it = vars.find(std::string(name));
    if (it != vars.end() && !it->second.empty()) return std::pair{name, it->second};
  }
  return std::nullopt;
}

int parseInt(std::string_view name, const std::string& value, int min) {
  constexpr std::size_t kMaxIntDigits = 9;  // below INT_MAX
  if (!isDigits(value) || value.size() > kMaxIntDigits) {
    throw ConfigError(fmt::format(
        "{}='{}' is not a whole number (0 to 999999999); run inside a SLURM job (sbatch/srun) "
        "that sets it, or unset SLURM_JOB_ID to run without SLURM",
        name, value));
  }
  const int parsed = std::stoi(value);
  if (parsed < min) {
    throw ConfigError(
        fmt::format("{}={} is below {}; check the SLURM job's environment", name, parsed, min));
  }
  return parsed;
}

std::optional<int> optionalInt(const Env& vars, std::string_view name, int min) {
  const auto found = firstSet(vars, {name});
  if (!found) return std::nullopt;
  return parseInt(found->first, found->second, min);
}

// Fails unless 0 <= value < limit.
void checkBelow(std::string_view name, int value, std::string_view limitName, int limit) {
  if (value >= limit) {
    throw ConfigError(
        fmt::format("{}={} is not below {}={}; the SLURM environment is inconsistent "
                    "(was it copied from another job?)",
                    name, value, limitName, limit));
  }
}

// FNV-1a, 64 bits: stable across platforms and releases, unlike std::hash.
std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// A decimal number of any length modulo kSlurmPortSpan.
std::uint32_t decimalModSpan(std::string_view digits) {
  std::uint32_t rest = 0;
  for (char c : digits) rest = (rest * 10 + static_cast<std::uint32_t>(c - '0')) % kSlurmPortSpan;
  return rest;
}

}  // namespace

std::vector<std::string> expandHostlist(std::string_view hostlist) {
  const std::vector<std::string_view> texts = splitEntries(hostlist);
  if (texts.empty()) {
    throw ConfigError(fmt::format("the hostlist '{}' names no hosts; {}", hostlist, kHostlistHint));
  }
  // Parse and count everything before expanding anything.
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  for (std::string_view text : texts) {
    entries.push_back(parseEntry(text));
    total += countHosts(entries.back());
    if (total > kMaxHostlistHosts) {
      throw ConfigError(fmt::format(
          "the hostlist expands to more than {} hosts (at entry '{}'); check the ranges for a "
          "typo",
          kMaxHostlistHosts, text));
    }
  }
  std::vector<std::string> hosts;
  hosts.reserve(static_cast<std::size_t>(total));
  for (const Entry& entry : entries) appendHosts(entry, hosts);
  return hosts;
}

std::vector<int> expandTasksPerNode(std::string_view tasksPerNode) {
  const auto bad = [&](std::string_view item, std::string_view reason) {
    return ConfigError(
        fmt::format("bad SLURM_TASKS_PER_NODE '{}': '{}' {}; expected counts like 2(x3),1",
                    tasksPerNode, item, reason));
  };
  const auto number = [&](std::string_view item, std::string_view digits) {
    constexpr std::size_t kMaxDigits = 6;
    if (!isDigits(digits) || digits.size() > kMaxDigits) throw bad(item, "is not N or N(xM)");
    const int value = std::stoi(std::string(digits));
    if (value < 1) throw bad(item, "has a zero count");
    return value;
  };
  if (tasksPerNode.empty()) throw bad(tasksPerNode, "is empty");
  std::vector<int> counts;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = tasksPerNode.find(',', start);
    const std::string_view item = tasksPerNode.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::size_t paren = item.find('(');
    const int count = number(item, item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string_view::npos) {
      const std::string_view rest = item.substr(paren);  // "(xM)"
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') {
        throw bad(item, "is not N or N(xM)");
      }
      repeat = number(item, rest.substr(2, rest.size() - 3));
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > kMaxHostlistHosts) {
      throw bad(item, fmt::format("repeats past {} nodes", kMaxHostlistHosts));
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return counts;
}

std::optional<SlurmJob> detectSlurm(const std::map<std::string, std::string>& vars) {
  const auto jobId = firstSet(vars, {env::kSlurmJobId});
  if (!jobId) return std::nullopt;

  SlurmJob job;
  job.jobId = jobId->second;
  if (std::any_of(job.jobId.begin(), job.jobId.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == '\x7f'; })) {
    throw ConfigError(fmt::format(
        "SLURM_JOB_ID='{}' contains whitespace or control characters; unset it or give the "
        "job's id",
        job.jobId));
  }

  // Step values first: srun may run on part of the allocation, and
  // SLURM_NODEID counts within the step.
  const auto nodes =
      firstSet(vars, {env::kSlurmStepNumNodes, env::kSlurmNnodes, env::kSlurmJobNumNodes});
  const auto nodelist =
      firstSet(vars, {env::kSlurmStepNodelist, env::kSlurmJobNodelist, env::kSlurmNodelist});
  if (!nodes || !nodelist) {
    throw ConfigError(fmt::format(
        "SLURM_JOB_ID={} is set but {} is not; run ddprun inside the job (sbatch or srun), or "
        "unset SLURM_JOB_ID to run without SLURM",
        job.jobId,
        !nodes ? "SLURM_NNODES (or SLURM_JOB_NUM_NODES)"
               : "SLURM_JOB_NODELIST (or SLURM_NODELIST)"));
  }
  job.nnodes = parseInt(nodes->first, nodes->second, 1);
  try {
    job.hosts = expandHostlist(nodelist->second);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", nodelist->first, e.what()));
  }
  if (job.hosts.size() != static_cast<std::size_t>(job.nnodes)) {
    throw ConfigError(fmt::format(
        "{}={} but {}='{}' names {} hosts; the SLURM environment is inconsistent (was it copied "
        "from another job?)",
        nodes->first, job.nnodes, nodelist->first, nodelist->second, job.hosts.size()));
  }

  const std::optional<int> nodeId = optionalInt(vars, env::kSlurmNodeId, 0);
  if (!nodeId && job.nnodes > 1) {
    throw ConfigError(fmt::format(
        "SLURM_NODEID is not set, so this process is not part of a job step and cannot tell "
        "which of the {} nodes it is on; start ddprun with `srun --ntasks-per-node=1 ddprun ...`",
        job.nnodes));
  }
  job.nodeRank = nodeId.value_or(0);
  job.ntasks = optionalInt(vars, env::kSlurmNtasks, 1).value_or(1);
  job.procId = optionalInt(vars, env::kSlurmProcId, 0).value_or(0);
  job.localId = optionalInt(vars, env::kSlurmLocalId, 0).value_or(0);
  checkBelow(env::kSlurmNodeId, job.nodeRank, nodes->first, job.nnodes);
  checkBelow(env::kSlurmProcId, job.procId, env::kSlurmNtasks, job.ntasks);
  checkBelow(env::kSlurmLocalId, job.localId, env::kSlurmNtasks, job.ntasks);

  if (const auto perNode = firstSet(vars, {env::kSlurmTasksPerNode})) {
    job.tasksPerNode = expandTasksPerNode(perNode->second);
  }
  job.inStep = firstSet(vars, {env::kSlurmStepId, env::kSlurmStepIdOld}).has_value();
  if (const auto cpus = firstSet(vars, {env::kSlurmJobCpusPerNode})) {
    try {
      job.cpusPerNode = expandTasksPerNode(cpus->second);
    } catch (const ConfigError&) {
      // Only a hint for srun's --cpus-per-task: without it srun chooses.
    }
  }
  return job;
}

std::uint16_t slurmMasterPort(std::string_view jobId) {
  if (jobId.empty()) {
    throw ConfigError("the SLURM job id is empty; give --master_port or set MASTER_PORT");
  }
  std::uint32_t n = 0;
  const std::size_t underscore = jobId.find('_');
  if (isDigits(jobId)) {
    n = decimalModSpan(jobId);
  } else if (underscore != std::string_view::npos && isDigits(jobId.substr(0, underscore)) &&
             isDigits(jobId.substr(underscore + 1))) {
    n = (decimalModSpan(jobId.substr(0, underscore)) +
         decimalModSpan(jobId.substr(underscore + 1))) %
        kSlurmPortSpan;
  } else {
    n = static_cast<std::uint32_t>(fnv1a64(jobId) % kSlurmPortSpan);
  }
  static_assert(kSlurmPortBase + kSlurmPortSpan - 1 <= std::numeric_limits<std::uint16_t>::max());
  return static_cast<std::uint16_t>(kSlurmPortBase + n);
}

}  // namespace ddprun
