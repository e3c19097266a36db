// RdzvConf: the parsed --rdzv_conf KEY=VALUE,... list.
//
// Every key a torchrun backend reads is known (docs/cli.md lists them with
// what ddprun does with each); an unknown key is a ConfigError that names it
// and the nearest known key ("jion_timeout: did you mean join_timeout?"),
// so a typo never silently falls back to a default. Typed getters check the
// value and throw ConfigError naming the key.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

class RdzvConf {
 public:
  // Throws ConfigError for a malformed item or an unknown key.
  static RdzvConf parse(const std::string& text);

  bool has(const std::string& key) const { return values_.contains(key); }
  std::optional<std::string> text(const std::string& key) const;
  // Seconds as a duration; `min` bounds the value from below (inclusive).
  std::optional<std::chrono::milliseconds> seconds(const std::string& key, double min = 0) const;
  std::optional<bool> boolean(const std::string& key) const;
  std::optional<int> integer(const std::string& key, int min, int max) const;

  // The keys torchrun's backends read, plus ddprun's token_file.
  static const std::vector<std::string_view>& knownKeys();

 private:
  std::map<std::string, std::string> values_;
};

// The known key closest to `key` by edit distance (for "did you mean").
std::string nearestKnownKey(std::string_view key);

}  // namespace ddprun::launcher
