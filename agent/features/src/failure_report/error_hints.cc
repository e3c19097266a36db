#include "ddprun/agent/features/failure_report/error_hints.h"

#include <fmt/format.h>

#include <regex>

namespace ddprun::agent {

std::string errorHint(const WorkerFailure& failure) {
  const std::string text = failureText(failure);
  if (text.find("EADDRINUSE") != std::string::npos ||
      text.find("ddress already in use") != std::string::npos) {
    std::smatch port;
    const bool known = std::regex_search(text, port, std::regex(R"(port: (\d+))"));
    return fmt::format(
        "{} is taken by another process. A script that sets MASTER_ADDR/MASTER_PORT itself "
        "(torch.multiprocessing.spawn tutorials) must pick a free port; or leave them as ddprun "
        "sets them (os.environ.setdefault): ddprun gives every job a free one",
        known ? "port " + port[1].str() : std::string("the port"));
  }
  std::smatch sizes;
  if (std::regex_search(text, sizes,
                        std::regex(R"(but the product \((\d+) \* (\d+)\) does not match the world )"
                                   R"(size \((\d+)\))"))) {
    return fmt::format(
        "Lightning's Trainer(devices={}, num_nodes={}) expects {} processes but the job has {}: "
        "give devices = --nproc_per_node and num_nodes = --nnodes (docs/frameworks.md)",
        sizes[1].str(), sizes[2].str(), std::stoi(sizes[1].str()) * std::stoi(sizes[2].str()),
        sizes[3].str());
  }
  return "";
}

}  // namespace ddprun::agent
