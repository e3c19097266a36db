#include "rendezvous_options.h"

#include <fmt/format.h>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/slurm.h"
#include "run_config.h"

namespace ddprun::launcher {

namespace {

constexpr std::uint16_t kDefaultC10dPort = 29400;
constexpr std::uint16_t kDefaultStaticPort = 29500;

std::chrono::milliseconds confSeconds(const std::map<std::string, std::string>& conf,
                                      const std::string& key, std::chrono::milliseconds fallback) {
  auto it = conf.find(key);
  if (it == conf.end()) return fallback;
  if (auto seconds = parseSeconds(it->second, 1e7)) {
    return std::chrono::milliseconds(static_cast<long long>(*seconds * 1000));
  }
  throw ConfigError(fmt::format("--rdzv_conf {}={} is not a number of seconds; give e.g. {}=30",
                                key, it->second, key));
}

std::optional<bool> confBool(const std::map<std::string, std::string>& conf,
                             const std::string& key) {
  auto it = conf.find(key);
  if (it == conf.end()) return std::nullopt;
  const std::string& v = it->second;
  if (v == "1" || v == "true" || v == "True" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "False" || v == "no") return false;
  throw ConfigError(
      fmt::format("--rdzv_conf {}={} is not a boolean; give {}=1 or {}=0", key, v, key, key));
}

std::string sharedToken(const std::map<std::string, std::string>& conf) {
  if (auto it = conf.find("token_file"); it != conf.end()) return readTokenFile(it->second);
  if (auto token = tokenFromEnv(env::kToken)) return *token;
  throw ConfigError(
      "a multi-node job needs a shared token: export the same DDPRUN_TOKEN on every node, or "
      "pass --rdzv_conf token_file=FILE (a file readable on every node)");
}

}  // namespace

std::pair<std::string, std::uint16_t> parseEndpoint(const std::string& text,
                                                    std::uint16_t defaultPort) {
  std::string host = text;
  std::string port;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    const std::size_t close = text.find(']');
    if (close == std::string::npos) {
      throw ConfigError(fmt::format("--rdzv_endpoint={} has an unclosed '['", text));
    }
    host = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':') port = text.substr(close + 2);
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) {
    throw ConfigError(fmt::format(
        "--rdzv_endpoint={} has no host; give HOST[:PORT], e.g. --rdzv_endpoint=node1:29400",
        text));
  }
  if (port.empty()) return {host, defaultPort};
  const auto value = parseInteger(port);
  if (!value || *value < 1 || *value > 65535) {
    throw ConfigError(
        fmt::format("--rdzv_endpoint={}: '{}' is not a port from 1 to 65535", text, port));
  }
  return {host, static_cast<std::uint16_t>(*value)};
}

void applyRendezvousOptions(const LaunchOptions& o, const std::map<std::string, std::string>& env,
                            agent::AgentConfig& config) {
  auto& r = config.rendezvous;
  std::string nnodesText = o.nnodes;
  std::string nodeRankText = o.nodeRank;
  std::string masterAddr = o.masterAddr;
  std::string masterPortText = o.masterPort;
  // SLURM fills what the user did not give (flag > PET_* > SLURM > default).
  if (!o.standalone && !o.isGiven("rdzv_endpoint")) {
    if (auto job = detectSlurm(env)) {
      if (auto tasks = job->tasksOnThisNode(); tasks && *tasks > 1 && job->nnodes > 1) {
        throw ConfigError(fmt::format(
            "SLURM started {} tasks on this node, so {} agents would compete; run one ddprun per "
            "node (srun --ntasks-per-node=1 ddprun --nproc_per_node=...)",
            *tasks, *tasks));
      }
      if (!o.isGiven("nnodes")) nnodesText = std::to_string(job->nnodes);
      if (!o.isGiven("node_rank")) nodeRankText = std::to_string(job->nodeRank);
      if (!o.isGiven("master_addr")) masterAddr = job->masterHost();
      if (!o.isGiven("master_port")) masterPortText = std::to_string(slurmMasterPort(job->jobId));
    }
  }
  const NodeRange nodes = parseNnodes(nnodesText);
  r.minNodes = nodes.min;
  r.maxNodes = nodes.max;
  const auto conf = parseRdzvConf(o.rdzvConf);
  const bool dynamic = o.rdzvBackend == "c10d" && !o.standalone;
  if (o.standalone && nodes.max > 1) {
    throw ConfigError(fmt::format(
        "--standalone runs a single node but --nnodes={}; drop one of the two", nnodesText));
  }
  if (!dynamic && nodes.max == 1) {
    if (parseInteger(nodeRankText).value_or(-1) != 0) {
      throw ConfigError(
          fmt::format("--node_rank={} is not from 0 to 0 (--nnodes={})", nodeRankText, nnodesText));
    }
    r.mode = agent::RendezvousMode::kStandalone;
    config.nnodes = 1;
    config.nodeRank = 0;
    if (!o.masterPort.empty() && o.isGiven("master_port")) {
      config.masterPort = std::stoi(o.masterPort);
    }
    return;
  }
  r.token = sharedToken(conf);
  r.localAddr = o.localAddr;
  r.joinTimeout = confSeconds(conf, "join_timeout", r.joinTimeout);
  r.lastCallTimeout = confSeconds(conf, "last_call_timeout", r.lastCallTimeout);
  r.closeTimeout = confSeconds(conf, "close_timeout", r.closeTimeout);
  r.keepAliveInterval = confSeconds(conf, "keep_alive_interval", r.keepAliveInterval);
  if (auto it = conf.find("keep_alive_max_attempt"); it != conf.end()) {
    const auto value = parseInteger(it->second);
    if (!value || *value < 1 || *value > 1000) {
      throw ConfigError(
          fmt::format("--rdzv_conf keep_alive_max_attempt={} is not a whole number from 1 to 1000",
                      it->second));
    }
    r.keepAliveMaxAttempts = static_cast<int>(*value);
  }
  r.isHost = confBool(conf, "is_host");
  config.nnodes = nodes.max;
  // The workers' MASTER_PORT is a free port on the node that gets group rank
  // 0; --master_port names the store in static mode.
  config.masterPort = 0;
  if (dynamic) {
    r.mode = agent::RendezvousMode::kDynamic;
    if (o.rdzvEndpoint.empty()) {
      throw ConfigError(
          "--rdzv_backend=c10d needs --rdzv_endpoint=HOST[:PORT], the store every node uses");
    }
    std::tie(r.endpointHost, r.endpointPort) = parseEndpoint(o.rdzvEndpoint, kDefaultC10dPort);
    if (o.isGiven("node_rank")) {
      r.nodeRank = static_cast<int>(parseInteger(nodeRankText).value_or(-1));
      if (r.nodeRank < 0 || r.nodeRank >= nodes.max) {
        throw ConfigError(fmt::format("--node_rank={} is not from 0 to {} (--nnodes={})",
                                      nodeRankText, nodes.max - 1, nnodesText));
      }
    }
    config.nodeRank = std::max(0, r.nodeRank);
    return;
  }
  // Static: a fixed set of nodes; node 0 hosts the store at MASTER_ADDR:PORT.
  r.mode = agent::RendezvousMode::kStatic;
  if (nodes.min != nodes.max) {
    throw ConfigError(fmt::format(
        "--nnodes={} is a range, which needs --rdzv_backend=c10d and --rdzv_endpoint; a static "
        "job has a fixed number of nodes",
        nnodesText));
  }
  const auto rank = parseInteger(nodeRankText);
  if (!rank || *rank < 0 || *rank >= nodes.max) {
    throw ConfigError(fmt::format("--node_rank={} is not from 0 to {} (--nnodes={})", nodeRankText,
                                  nodes.max - 1, nnodesText));
  }
  r.nodeRank = static_cast<int>(*rank);
  config.nodeRank = r.nodeRank;
  if (masterAddr.empty()) {
    throw ConfigError("--master_addr is empty; give node 0's address, e.g. --master_addr=node1");
  }
  r.endpointHost = masterAddr;
  r.endpointPort = kDefaultStaticPort;
  if (!masterPortText.empty()) {
    const auto port = parseInteger(masterPortText);
    if (!port || *port < 1 || *port > 65535) {
      throw ConfigError(fmt::format(
          "--master_port={} is not a whole number from 1 to 65535; give e.g. --master_port=29500",
          masterPortText));
    }
    r.endpointPort = static_cast<std::uint16_t>(*port);
  }
  // Node 0 is reachable at MASTER_ADDR by definition.
  if (r.nodeRank == 0 && r.localAddr.empty()) r.localAddr = masterAddr;
  r.lastCallTimeout = std::chrono::milliseconds(0);
}

}  // namespace ddprun::launcher
