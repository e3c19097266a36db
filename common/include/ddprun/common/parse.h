// Strict parsing of numbers given by users (options, environment): the
// whole text must be the number, or the result is nullopt.
//
// Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// A decimal integer ("12", "-3"); nullopt for "", "1.5", "12x", overflow.
std::optional<long long> parseInteger(std::string_view text);

// A non-negative number of seconds ("30", "0.1") up to `max`.
std::optional<double> parseSeconds(std::string_view text, double max);
// The same as a duration (whole milliseconds).
std::optional<std::chrono::milliseconds> parseDuration(std::string_view text, double maxSeconds);

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}. Views into `text`.
std::vector<std::string_view> splitList(std::string_view text, char separator = ',');

// `text` without leading and trailing whitespace.
std::string_view trimSpaces(std::string_view text);

// "HOST:PORT" for messages and options, with an IPv6 address in brackets
// ("[::1]:29400"), as users type endpoints.
std::string hostPort(std::string_view host, int port);

}  // namespace ddprun
