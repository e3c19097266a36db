// Strict parsing of numbers given by users (options, environment): the
// whole text must be the number, or the result is nullopt.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

namespace ddprun {

// A decimal integer ("12", "-3"); nullopt for "", "1.5", "12x", overflow.
std::optional<long long> parseInteger(std::string_view text);

// A non-negative number of seconds ("30", "0.1") up to `max`.
std::optional<double> parseSeconds(std::string_view text, double max);

}  // namespace ddprun
