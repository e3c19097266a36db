#include "ddprun/common/text_file.h"

#include <fstream>

#include "ddprun/common/parse.h"

namespace ddprun {

std::string readFirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(trimSpaces(line));
}

}  // namespace ddprun
