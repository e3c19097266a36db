// ddprun::worker's file-timer client writes PyTorch's FileTimerClient
// requests (checked by reading a real named pipe) and fails clearly when no
// agent serves one.
#include "ddprun/worker/file_timer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "ddprun/common/error.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Pipe {
  Pipe() {
    path = fs::path(::testing::TempDir()) / ("timer-" + std::to_string(::getpid()));
    fs::remove(path);
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK);
  }
  ~Pipe() {
    ::close(fd);
    fs::remove(path);
  }
  nlohmann::json next() {
    std::string line;
    char c = 0;
    while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
    return nlohmann::json::parse(line);
  }
  fs::path path;
  int fd = -1;
};

TEST(FileTimer, WritesPyTorchsRequests) {
  Pipe pipe;
  FileTimer timer(pipe.path);
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  timer.acquire("step \"7\"", 30s);
  auto armed = pipe.next();
  EXPECT_EQ(armed["version"], 1);
  EXPECT_EQ(armed["pid"], ::getpid());
  EXPECT_EQ(armed["scope_id"], "step \"7\"");
  EXPECT_EQ(armed["signal"], SIGKILL);
  EXPECT_GE(armed["expiration_time"].get<double>(), before + 30);
  EXPECT_LT(armed["expiration_time"].get<double>(), before + 40);
  timer.release("step \"7\"");
  auto released = pipe.next();
  EXPECT_EQ(released["expiration_time"].get<double>(), -1);
  EXPECT_EQ(released["signal"], 0);
}

TEST(FileTimer, ExpiresReleasesWhenTheGuardEnds) {
  Pipe pipe;
  ::setenv("TORCHELASTIC_TIMER_FILE", pipe.path.c_str(), 1);
  {
    auto guard = expires(5s, "scoped", SIGTERM);
    auto armed = pipe.next();
    EXPECT_EQ(armed["scope_id"], "scoped");
    EXPECT_EQ(armed["signal"], SIGTERM);
  }
  EXPECT_EQ(pipe.next()["expiration_time"].get<double>(), -1);
  ::unsetenv("TORCHELASTIC_TIMER_FILE");
}

TEST(FileTimer, FailsClearlyWithoutAnAgent) {
  ::unsetenv("TORCHELASTIC_TIMER_FILE");
  try {
    auto guard = expires(5s, "x");
    FAIL() << "expires() without a timer file";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TORCHELASTIC_ENABLE_FILE_TIMER=1"), std::string::npos);
  }
  // A pipe nobody reads: the non-blocking open fails at once.
  const fs::path orphan = fs::path(::testing::TempDir()) / ("orphan-" + std::to_string(::getpid()));
  fs::remove(orphan);
  ASSERT_EQ(::mkfifo(orphan.c_str(), 0600), 0);
  EXPECT_THROW(FileTimer(orphan).acquire("x", 1s), Error);
  fs::remove(orphan);
  EXPECT_THROW(FileTimer(orphan).acquire("x", 1s), Error);
  EXPECT_THROW(FileTimer("/dev/null").acquire(std::string(5000, 'x'), 1s), ConfigError);
}

}  // namespace
}  // namespace ddprun::worker
