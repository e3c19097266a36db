// StdSpec: which of a worker's streams (stdout, stderr) a setting applies
// to, per local rank: torchrun's --redirects / --tee values.
//
// Accepted text: "0".."3" for every rank (1 = stdout, 2 = stderr, 3 = both),
// or "local_rank:value" pairs separated by commas ("0:3,12:1"); unlike
// torchrun, local ranks of any number of digits are accepted.
//
// Thread-safety: a plain value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::agent {

enum class Streams : unsigned { kNone = 0, kOut = 1, kErr = 2, kBoth = 3 };

inline bool includes(Streams set, Streams stream) {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(stream)) != 0;
}

struct StdSpec {
  Streams all = Streams::kNone;    // for ranks not listed in perRank
  std::map<int, Streams> perRank;  // explicit "rank:value" entries

  Streams forRank(int localRank) const {
    auto it = perRank.find(localRank);
    return it == perRank.end() ? all : it->second;
  }
  bool any() const;
};

// Parses `text`; on failure returns nullopt and sets `error` to a sentence
// that names the bad part.
std::optional<StdSpec> parseStdSpec(std::string_view text, std::string& error);

}  // namespace ddprun::agent
