#include "ddprun/agent/std_spec.h"

#include <fmt/format.h>

#include <limits>

#include "ddprun/common/parse.h"

namespace ddprun::agent {

namespace {

std::optional<int> parseInt(std::string_view text) {
  auto value = parseInteger(text);
  if (!value || *value > std::numeric_limits<int>::max() ||
      *value < std::numeric_limits<int>::min()) {
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

std::optional<Streams> parseStreams(std::string_view text) {
  auto value = parseInt(text);
  if (!value || *value < 0 || *value > 3) return std::nullopt;
  return static_cast<Streams>(*value);
}

}  // namespace

bool StdSpec::any() const {
  if (all != Streams::kNone) return true;
  for (const auto& [rank, streams] : perRank) {
    if (streams != Streams::kNone) return true;
  }
  return false;
}

std::optional<StdSpec> parseStdSpec(std::string_view text, std::string& error) {
  StdSpec spec;
  if (text.find(':') == std::string_view::npos) {
    auto streams = parseStreams(text);
    if (!streams) {
      error = fmt::format("'{}' is not 0, 1, 2 or 3 (or a list like 0:3,1:1)", text);
      return std::nullopt;
    }
    spec.all = *streams;
    return spec;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t colon = item.find(':');
    const auto rank =
        colon == std::string_view::npos ? std::nullopt : parseInt(item.substr(0, colon));
    const auto streams =
        colon == std::string_view::npos ? std::nullopt : parseStreams(item.substr(colon + 1));
    if (!rank || *rank < 0 || !streams) {
      error = fmt::format("'{}' in '{}' is not local_rank:value with value 0..3", item, text);
      return std::nullopt;
    }
    if (!spec.perRank.emplace(*rank, *streams).second) {
      error = fmt::format("local rank {} appears twice in '{}'", *rank, text);
      return std::nullopt;
    }
    start = comma + 1;
  }
  return spec;
}

}  // namespace ddprun::agent
