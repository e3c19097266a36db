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

// Fills config.rendezvous, config.nnodes, config.nodeRank and (for SLURM)
// the master address and port. `env` is the process environment. A store
// without a token gets config.rendezvous.openStoreNotice (one node of the
// job prints it).
void applyRendezvousOptions(const LaunchOptions& options,
                            const std::map<std::string, std::string>& env,
                            agent::AgentConfig& config);

// --rdzv_backend=etcd: the members' endpoints (a comma-separated list,
// each optionally http:// or https://) and the etcd keys of `conf` (TLS
// files, etcd_prefix) into `r`.
class RdzvConf;
void applyEtcd(const std::string& endpoints, const RdzvConf& conf, agent::RendezvousConfig& r);

}  // namespace ddprun::launcher
