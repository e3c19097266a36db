#include "torch_version.h"

#include <chrono>

#include "ddprun/common/command_output.h"
#include "ddprun/common/parse.h"

namespace ddprun::launcher {

namespace {

constexpr char kProbe[] =
    "import importlib.util as u, os, re\n"
    "s = u.find_spec('torch')\n"
    "f = os.path.join(s.submodule_search_locations[0], 'version.py') if s else ''\n"
    "m = re.search(r\"__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", open(f).read()) "
    "if f and os.path.isfile(f) else None\n"
    "print(m.group(1) if m else '')\n";

constexpr std::chrono::milliseconds kDeadline{10000};

}  // namespace

std::optional<TorchVersion> parseTorchVersion(const std::string& text) {
  const std::size_t dot = text.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::size_t end = text.find_first_not_of("0123456789", dot + 1);
  const auto major = parseInteger(text.substr(0, dot));
  const auto minor = parseInteger(text.substr(dot + 1, end - dot - 1));
  if (!major || !minor) return std::nullopt;
  return TorchVersion{static_cast<int>(*major), static_cast<int>(*minor), text};
}

std::optional<TorchVersion> probeTorchVersion(const std::string& interpreter) {
  auto printed = commandOutput({interpreter, "-c", kProbe}, {kDeadline, 4096, false});
  if (!printed) return std::nullopt;
  std::string out = std::move(*printed);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (const std::size_t nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  return parseTorchVersion(out);
}

}  // namespace ddprun::launcher
