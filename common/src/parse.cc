#include "ddprun/common/parse.h"

#include <cctype>
#include <charconv>
#include <string>

namespace ddprun {

std::optional<long long> parseInteger(std::string_view text) {
  long long value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> splitList(std::string_view text, char separator) {
  std::vector<std::string_view> items;
  for (;;) {
    const std::size_t at = text.find(separator);
    items.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return items;
    text.remove_prefix(at + 1);
  }
}

std::string_view trimSpaces(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
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

std::optional<std::chrono::milliseconds> parseDuration(std::string_view text, double maxSeconds) {
  const auto seconds = parseSeconds(text, maxSeconds);
  if (!seconds) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(*seconds * 1000));
}

std::string hostPort(std::string_view host, int port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string text;
  if (v6) text += '[';
  text += host;
  if (v6) text += ']';
  return text + ':' + std::to_string(port);
}

}  // namespace ddprun
