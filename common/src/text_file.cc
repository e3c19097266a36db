#include "ddprun/common/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "ddprun/common/parse.h"

namespace ddprun {

std::string readFirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(trimSpaces(line));
}

std::string replaceFile(const std::filesystem::path& path, std::string_view content) {
  const std::string temporary = path.string() + ".ddprun-tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  int error = 0;
  while (!content.empty()) {
    const ssize_t written = ::write(fd, content.data(), content.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      error = written < 0 ? errno : ENOSPC;
      break;
    }
    content.remove_prefix(static_cast<std::size_t>(written));
  }
  // close() reports a delayed write error (NFS, a full quota).
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    return std::strerror(error);
  }
  return "";
}

}  // namespace ddprun
