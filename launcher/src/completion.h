// Shell completion scripts for ddprun's own options (--print_completion,
// torchrun 2.14's --print-completion): bash, zsh and tcsh, made from the
// option table itself, so a new option completes without an edit here.
// Options complete after a dash; anything else completes as a file (the
// program and its arguments).
//
// Thread-safety: pure functions.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

namespace ddprun::launcher {

inline constexpr const char* kCompletionShells[] = {"bash", "zsh", "tcsh"};

// The script for `shell` (one of kCompletionShells).
std::string completionScript(const CLI::App& app, std::string_view shell);

}  // namespace ddprun::launcher
