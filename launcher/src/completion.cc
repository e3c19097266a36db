#include "completion.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace ddprun::launcher {

namespace {

// "--nproc_per_node", "--nproc-per-node", ... in definition order, plus
// "--help"; the short forms ("-m") too.
std::vector<std::string> optionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

}  // namespace

std::string completionScript(const CLI::App& app, std::string_view shell) {
  const std::vector<std::string> names = optionNames(app);
  const std::string words = fmt::format("{}", fmt::join(names, " "));
  if (shell == "bash") {
    return fmt::format(
        "# bash completion for ddprun: eval \"$(ddprun --print_completion bash)\"\n"
        "_ddprun() {{\n"
        "  local cur=${{COMP_WORDS[COMP_CWORD]}}\n"
        "  if [[ $cur == -* ]]; then\n"
        "    COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))\n"
        "  else\n"
        "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
        "  fi\n"
        "}}\n"
        "complete -o default -F _ddprun ddprun\n",
        words);
  }
  if (shell == "zsh") {
    return fmt::format(
        "#compdef ddprun\n"
        "# zsh completion for ddprun: ddprun --print_completion zsh > ~/.zfunc/_ddprun\n"
        "_ddprun() {{\n"
        "  local -a options\n"
        "  options=({})\n"
        "  if [[ $PREFIX == -* ]]; then\n"
        "    compadd -a options\n"
        "  else\n"
        "    _files\n"
        "  fi\n"
        "}}\n"
        "_ddprun \"$@\"\n",
        words);
  }
  // tcsh: a word after a dash is an option, any other a file.
  std::vector<std::string> bare;
  for (const auto& name : names) {
    if (name.starts_with("--")) bare.push_back(name.substr(2));
  }
  return fmt::format(
      "# tcsh completion for ddprun: eval `ddprun --print_completion tcsh`\n"
      "complete ddprun 'c/--/({})/' 'p/*/f/'\n",
      fmt::join(bare, " "));
}

}  // namespace ddprun::launcher
