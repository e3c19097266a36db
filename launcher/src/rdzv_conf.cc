#include "rdzv_conf.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"

namespace ddprun::launcher {

namespace {

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t swap = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + swap});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<std::string_view>& RdzvConf::knownKeys() {
  static const std::vector<std::string_view> keys = {
      // dynamic rendezvous (c10d, etcd-v2)
      "join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
      "keep_alive_interval", "keep_alive_max_attempt",
      // c10d backend
      "read_timeout", "is_host", "store_type", "use_libuv",
      // static and etcd
      "timeout", "rank",
      // ddprun: hosts that keep failing (docs/self-healing.md)
      "max_node_failures", "node_cooldown",
      // etcd-v2 backend, legacy etcd backend
      "protocol", "ssl_cert", "ssl_cert_key", "ca_cert", "cert", "key", "cacert", "etcd_prefix",
      // ddprun's etcd backend: how long a job's keys outlive its last node
      "job_ttl",
      // ddprun
      "token_file"};
  return keys;
}

std::string nearestKnownKey(std::string_view key) {
  std::string_view best;
  std::size_t bestDistance = SIZE_MAX;
  for (std::string_view known : RdzvConf::knownKeys()) {
    const std::size_t d = editDistance(key, known);
    if (d < bestDistance) {
      best = known;
      bestDistance = d;
    }
  }
  return std::string(best);
}

RdzvConf RdzvConf::parse(const std::string& text) {
  RdzvConf conf;
  if (text.empty()) return conf;
  for (std::string_view item : splitList(text)) {
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw ConfigError(fmt::format(
          "--rdzv_conf={}: '{}' is not KEY=VALUE; give e.g. --rdzv_conf=join_timeout=600", text,
          item));
    }
    const std::string key(trimSpaces(item.substr(0, eq)));
    const std::string value(trimSpaces(item.substr(eq + 1)));
    if (key.empty() || value.empty()) {
      throw ConfigError(fmt::format(
          "--rdzv_conf={}: '{}' has an empty {}; give e.g. --rdzv_conf=join_timeout=600", text,
          item, key.empty() ? "key" : "value"));
    }
    const auto& known = knownKeys();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ConfigError(
          fmt::format("--rdzv_conf: unknown key '{}'; did you mean '{}'? (docs/cli.md lists "
                      "every key)",
                      key, nearestKnownKey(key)));
    }
    conf.values_[key] = value;
  }
  return conf;
}

std::optional<std::string> RdzvConf::text(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::chrono::milliseconds> RdzvConf::seconds(const std::string& key,
                                                           double min) const {
  auto value = text(key);
  if (!value) return std::nullopt;
  const auto duration = parseDuration(*value, 1e7);
  if (!duration || *duration < std::chrono::duration<double>(min)) {
    throw ConfigError(fmt::format(
        "--rdzv_conf {}={} is not a number of seconds{}; give e.g. {}=30", key, *value,
        min > 0 ? fmt::format(" of at least {}", min) : std::string(" (0 or more)"), key));
  }
  return *duration;
}

std::optional<bool> RdzvConf::boolean(const std::string& key) const {
  auto value = text(key);
  if (!value) return std::nullopt;
  // torchrun's spellings, any case.
  std::string v = *value;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") return false;
  throw ConfigError(
      fmt::format("--rdzv_conf {}={} is not a boolean; give {}=1 or {}=0", key, *value, key, key));
}

std::optional<int> RdzvConf::integer(const std::string& key, int min, int max) const {
  auto value = text(key);
  if (!value) return std::nullopt;
  const auto number = parseInteger(*value);
  if (!number || *number < min || *number > max) {
    throw ConfigError(fmt::format("--rdzv_conf {}={} is not a whole number from {} to {}", key,
                                  *value, min, max));
  }
  return static_cast<int>(*number);
}

}  // namespace ddprun::launcher
