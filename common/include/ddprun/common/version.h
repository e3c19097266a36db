// This build's version and commit, for the executables' --version.
//
// Thread-safety: pure.
#pragma once

#include <string>
#include <string_view>

namespace ddprun {

// "ddprun 0.1.0 (commit 0123456789ab)": `program`, the project's version
// and the git commit it was built from ("-dirty" with local changes,
// "unknown" outside a checkout).
std::string versionText(std::string_view program);

}  // namespace ddprun
