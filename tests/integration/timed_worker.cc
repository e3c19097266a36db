// A C++ worker for the file-timer tests: with --hang, attempt 0 hangs (rank
// 1 inside a 1 s timer it never releases); otherwise it times a short step
// and releases it, then prints "attempt N done".
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/worker/file_timer.h"

int run(int argc, char** argv) {
  using namespace std::chrono_literals;
  const bool hang = argc > 1 && std::string(argv[1]) == "--hang";
  const std::string attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (hang && attempt == "0") {
    std::optional<ddprun::worker::TimerGuard> guard;
    if (std::string(std::getenv("RANK")) == "1") {
      guard.emplace(ddprun::worker::expires(1s, "cpp_stuck_step"));
    }
    std::this_thread::sleep_for(120s);  // rank 0 waits too, until the agent stops it
  }
  {
    auto guard = ddprun::worker::expires(30s, "cpp_good_step");
    std::this_thread::sleep_for(200ms);
  }
  std::cout << "attempt " << attempt << " done" << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "timed_worker: " << e.what() << std::endl;
    return 1;
  }
}
