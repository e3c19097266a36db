// The chaos harness's C++ worker: chaos_train.py's training on
// ddprun::worker (LibTorch's Gloo process group through the job's store),
// line for line: the same exact integer arithmetic, the same checkpoint file
// and format, the same lines, the same holds at the harness's FIFOs and the
// same exit file. A rank that trained in a stale world changes the final
// checksum.
//
// Environment: CHAOS_STEPS, CHAOS_SAMPLES, CHAOS_CHECKPOINT, CHAOS_DIR (see
// chaos_train.py).
#include <unistd.h>

#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "ddprun/worker/environment.h"
#include "ddprun/worker/process_group.h"

namespace {

namespace fs = std::filesystem;
namespace dw = ddprun::worker;
__extension__ using Wide = unsigned __int128;

constexpr std::uint64_t kModulus = (std::uint64_t{1} << 61) - 1;
constexpr std::uint64_t kMultiplier = 6364136223846793005ULL;

std::string variable(const char* name, const char* fallback = nullptr) {
  const char* value = std::getenv(name);
  if (value != nullptr) return value;
  if (fallback != nullptr) return fallback;
  throw std::runtime_error(std::string(name) + " is not set");
}

std::uint64_t sampleValue(std::uint64_t state, int i, int step) {
  return static_cast<std::uint64_t>((Wide(state) * 31 + Wide(i) * 7 + Wide(step)) % 1000003);
}

struct Checkpoint {
  int step = 0;
  std::uint64_t state = 1;
};

Checkpoint load(const fs::path& path) {
  Checkpoint checkpoint;
  std::ifstream in(path);
  if (in) in >> checkpoint.step >> checkpoint.state;
  if (!in) checkpoint = {};
  return checkpoint;
}

void save(const fs::path& path, const Checkpoint& checkpoint) {
  const std::string partial = path.string() + "." + std::to_string(::getpid());
  {
    std::ofstream out(partial, std::ios::trunc);
    out << checkpoint.step << " " << checkpoint.state << "\n";
  }
  fs::rename(partial, path);
}

int train() {
  const int steps = std::stoi(variable("CHAOS_STEPS"));
  const int samples = std::stoi(variable("CHAOS_SAMPLES", "64"));
  const fs::path checkpointPath = variable("CHAOS_CHECKPOINT");
  const fs::path folder = variable("CHAOS_DIR");
  const fs::path exitFile = folder / ("exit-" + std::to_string(::getpid()));

  const auto environment = dw::Environment::detect();
  dw::ProcessGroupOptions options;
  options.backend = dw::Backend::kGloo;
  auto group = dw::initProcessGroup(environment, options);
  const int rank = group->rank();
  const int world = group->size();
  Checkpoint at = load(checkpointPath);
  std::cout << "start rank " << rank << " world " << world << " pid " << ::getpid() << " step "
            << at.step << " restart " << environment.restartCount << std::endl;
  while (at.step < steps) {
    if (fs::exists(exitFile)) {
      std::cout << "rank " << rank << " exits 1 as the harness asked" << std::endl;
      return 1;
    }
    std::uint64_t share = 0;
    for (int i = rank; i < samples; i += world) share += sampleValue(at.state, i, at.step);
    auto total = torch::tensor({static_cast<std::int64_t>(share)}, torch::kInt64);
    group->allReduce(total);
    at.state = static_cast<std::uint64_t>(
        (Wide(at.state) * kMultiplier + static_cast<std::uint64_t>(total.item<std::int64_t>())) %
        kModulus);
    ++at.step;
    if (rank == 0) {
      if (at.step % 5 == 0 || at.step == steps) save(checkpointPath, at);
      std::cout << "step " << at.step << " world " << world << std::endl;
      const fs::path hold = folder / ("hold-" + std::to_string(at.step));
      if (fs::exists(hold)) {
        std::ofstream(folder / ("at-" + std::to_string(at.step))).close();
        std::ifstream gate(hold);  // a FIFO: until the harness lets go
        std::string rest;
        std::getline(gate, rest, '\0');
      }
    }
  }
  group->barrier();
  if (rank == 0) std::cout << "checksum " << at.state << std::endl;
  std::cout << "done rank " << rank << " world " << world << std::endl;
  return 0;
}

}  // namespace

int main() {
  try {
    return train();
  } catch (const std::exception& e) {
    std::cerr << "chaos-train: " << e.what() << std::endl;
    return 1;
  }
}
