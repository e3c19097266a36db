// Choosing how this node meets the others, from --nnodes, --node_rank,
// --master_addr/--master_port, --rdzv_* and SLURM's variables (flag > PET_*
// > SLURM-derived > default). Throws ConfigError with a message that names
// the option and the fix.
//
// Thread-safety: pure functions (they read the environment).
#pragma once

#include <map>
#include <string>

#include "ddprun/agent/agent_config.h"
#include "launch_options.h"

namespace ddprun::launcher {

// Splits "host[:port]" (IPv6 in brackets); throws ConfigError.
std::pair<std::string, std::uint16_t> parseEndpoint(const std::string& text,
                                                    std::uint16_t defaultPort);

// Fills config.rendezvous, config.nnodes, config.nodeRank and (for SLURM)
// the master address and port. `env` is the process environment.
void applyRendezvousOptions(const LaunchOptions& options,
                            const std::map<std::string, std::string>& env,
                            agent::AgentConfig& config);

}  // namespace ddprun::launcher
