#include "ddprun/common/parse.h"

#include <charconv>
#include <string>

namespace ddprun {

std::optional<long long> parseInteger(std::string_view text) {
  long long value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> parseSeconds(std::string_view text, double max) {
  try {
    const std::string copy(text);
    std::size_t used = 0;
    const double value = std::stod(copy, &used);
    if (used != copy.size() || !(value >= 0) || value > max) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun
