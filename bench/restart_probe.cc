// restart_probe: the worker used by bench/launcher_bench.py to time restarts.
//
// On attempt 0 (TORCHELASTIC_RESTART_COUNT=0) rank 1 records the time and
// exits 1; the other ranks record their start and wait to be stopped. On a
// later attempt every rank records its start time and exits 0. Times are
// CLOCK_REALTIME nanoseconds written to $PROBE_DIR/<event>_<attempt>_<rank>.
//
// With PROBE_MODE=wait (bench/recovery_bench.py) every rank records
// start_<round>_<rank> (the round from DDPRUN_STORE_PREFIX) and waits to be
// stopped.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void record(const std::string& dir, const char* event, const char* attempt, const char* rank) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const std::string path = dir + "/" + event + "_" + attempt + "_" + rank;
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%lld\n", static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
    std::fclose(f);
  }
}

}  // namespace

int main() {
  const char* dir = std::getenv("PROBE_DIR");
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const char* rank = std::getenv("RANK");
  if (dir == nullptr || attempt == nullptr || rank == nullptr) return 2;
  const char* mode = std::getenv("PROBE_MODE");
  if (mode != nullptr && std::string(mode) == "wait") {
    std::string prefix =
        std::getenv("DDPRUN_STORE_PREFIX") ? std::getenv("DDPRUN_STORE_PREFIX") : "";
    const auto at = prefix.find("round_");
    const std::string round =
        at == std::string::npos ? "0" : prefix.substr(at + 6, prefix.find('/', at) - at - 6);
    record(dir, "start", round.c_str(), rank);
    pause();
    return 0;
  }
  record(dir, "start", attempt, rank);
  if (std::string(attempt) != "0") return 0;
  if (std::string(rank) == "1") {
    usleep(200 * 1000);  // let every rank of attempt 0 start first
    record(dir, "fail", attempt, rank);
    return 1;
  }
  pause();  // until the launcher stops this worker
  return 0;
}
