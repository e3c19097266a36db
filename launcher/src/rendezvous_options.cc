#include "rendezvous_options.h"

#include <fmt/format.h>

#include <filesystem>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/parse.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/slurm.h"
#include "endpoint.h"
#include "rdzv_conf.h"
#include "run_config.h"

namespace ddprun::launcher {

namespace {

constexpr std::uint16_t kDefaultC10dPort = 29400;
constexpr std::uint16_t kDefaultStaticPort = 29500;
constexpr std::uint16_t kDefaultEtcdPort = 2379;

}  // namespace

// The rdzv_conf keys of torchrun's etcd backends: protocol,
// ca_cert/cacert, ssl_cert/cert, ssl_cert_key/key, etcd_prefix.
void applyEtcd(const std::string& endpoints, const RdzvConf& conf, agent::RendezvousConfig& r) {
  r.backend = agent::RendezvousBackendKind::kEtcd;
  if (auto protocol = conf.text("protocol")) {
    if (*protocol != "http" && *protocol != "https") {
      throw ConfigError(fmt::format(
          "--rdzv_conf protocol={} is not http or https; give protocol=https for an etcd with TLS",
          *protocol));
    }
    r.etcd.tls = *protocol == "https";
  }
  bool schemeHttps = false;
  bool schemeHttp = false;
  for (std::string_view item : splitList(endpoints)) {
    std::string text(trimSpaces(item));
    if (text.empty()) continue;  // "h1:2379,"
    for (const auto& [scheme, https] : {std::pair{"https://", true}, std::pair{"http://", false}}) {
      if (text.starts_with(scheme)) {
        text = text.substr(std::string_view(scheme).size());
        (https ? schemeHttps : schemeHttp) = true;
      }
    }
    while (!text.empty() && text.back() == '/') text.pop_back();
    const Endpoint e = parseEndpoint("rdzv_endpoint", text, kDefaultEtcdPort);
    r.etcd.endpoints.push_back(hostPort(e.host, e.port));
  }
  if (r.etcd.endpoints.empty()) {
    throw ConfigError(
        "--rdzv_backend=etcd needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...], the etcd "
        "members' client addresses");
  }
  if (schemeHttps && schemeHttp) {
    throw ConfigError(fmt::format(
        "--rdzv_endpoint={} mixes http:// and https://; every etcd member speaks the same",
        endpoints));
  }
  if (schemeHttps) r.etcd.tls = true;
  const auto file = [&](std::initializer_list<const char*> keys) -> std::string {
    for (const char* key : keys) {
      if (auto path = conf.text(key)) {
        if (!std::filesystem::is_regular_file(*path)) {
          throw ConfigError(fmt::format(
              "--rdzv_conf {}={}: no such file; give the path of a PEM file", key, *path));
        }
        return *path;
      }
    }
    return "";
  };
  r.etcd.caFile = file({"ca_cert", "cacert"});
  r.etcd.certFile = file({"ssl_cert", "cert"});
  r.etcd.keyFile = file({"ssl_cert_key", "key"});
  if (r.etcd.certFile.empty() != r.etcd.keyFile.empty()) {
    throw ConfigError(
        "--rdzv_conf: an etcd client certificate needs both ssl_cert (cert) and ssl_cert_key "
        "(key)");
  }
  if (!r.etcd.tls && !(r.etcd.caFile.empty() && r.etcd.certFile.empty())) {
    throw ConfigError(
        "--rdzv_conf has etcd TLS files but protocol is http; add protocol=https (or give the "
        "endpoints as https://...)");
  }
  if (auto prefix = conf.text("etcd_prefix")) {
    if (prefix->empty() || prefix->front() != '/') {
      throw ConfigError(fmt::format(
          "--rdzv_conf etcd_prefix={} does not start with '/'; give e.g. etcd_prefix=/ddprun",
          *prefix));
    }
    r.etcd.prefix = *prefix;
  }
}

namespace {

// The job's token, or empty: without DDPRUN_TOKEN or token_file the store
// serves every client unauthenticated, as torchrun's does, and `notice`
// says so (printed by one node of the job).
std::string sharedToken(const RdzvConf& conf, const std::string& endpoint, std::string& notice) {
  if (auto file = conf.text("token_file")) return readTokenFile(*file);
  if (auto token = tokenFromEnv(env::kToken)) return *token;
  notice = fmt::format(
      "the rendezvous store at {} is open (no DDPRUN_TOKEN or token_file): any process that "
      "reaches it can read and change the job's keys, as with torchrun's store; export the same "
      "DDPRUN_TOKEN on every node to protect it",
      endpoint);
  return "";
}

// The --rdzv_conf keys that shape the rendezvous (docs/cli.md).
void applyConf(const RdzvConf& conf, bool dynamic, agent::RendezvousConfig& r) {
  if (auto v = conf.seconds("join_timeout", 0.001)) r.joinTimeout = *v;
  if (auto v = conf.seconds("last_call_timeout")) r.lastCallTimeout = *v;
  if (auto v = conf.seconds("close_timeout")) r.closeTimeout = *v;
  if (auto v = conf.seconds("keep_alive_interval", 0.001)) r.keepAliveInterval = *v;
  if (auto v = conf.integer("keep_alive_max_attempt", 1, 1000)) r.keepAliveMaxAttempts = *v;
  if (auto v = conf.seconds("heartbeat_timeout", 0.001)) {
    // A node is dead after this long without a heartbeat.
    const auto interval = r.keepAliveInterval.count();
    r.keepAliveMaxAttempts =
        static_cast<int>(std::max<long long>(1, (v->count() + interval - 1) / interval));
  }
  if (auto v = conf.seconds("read_timeout", 0.001)) r.requestTimeout = *v;
  if (auto v = conf.integer("max_node_failures", 0, 1000000)) r.maxNodeFailures = *v;
  if (auto v = conf.seconds("node_cooldown", 0.001)) r.nodeCooldown = *v;
  if (auto v = conf.seconds("job_ttl", 1)) r.jobTtl = *v;
  // torchrun's static backend waits `timeout` for every node; c10d ignores it.
  if (auto v = conf.seconds("timeout", 0.001); v && !dynamic) r.joinTimeout = *v;
  r.isHost = conf.boolean("is_host");
  if (auto type = conf.text("store_type"); type && *type != "tcp") {
    throw ConfigError(fmt::format(
        "--rdzv_conf store_type={} is not supported: ddprun's store is a TCP store; drop the key "
        "or give store_type=tcp",
        *type));
  }
  conf.boolean("use_libuv");  // checked; ddprun's store is its own server
}

// The Slurm job step this ddprun runs in, or nullopt (no step, or an
// environment detectSlurm refuses: the endpoint was given, so the job does
// not depend on it).
std::optional<SlurmJob> slurmStep(const std::map<std::string, std::string>& env) {
  try {
    if (auto job = detectSlurm(env); job && job->inStep) return job;
  } catch (const ConfigError&) {
  }
  return std::nullopt;
}

// A job within one Slurm step: its nodes are the step's, and one that is
// lost never returns (Slurm restarts no task), so the rendezvous fails the
// job once fewer than MIN are left instead of waiting for it.
void fixNodesToTheStep(const std::optional<SlurmJob>& step, agent::RendezvousConfig& r) {
  if (step && r.maxNodes <= step->nnodes) r.fixedNodes = step->nnodes;
}

}  // namespace

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
  if (const auto it = env.find(env::kProgressInterval); it != env.end()) {
    const auto interval = parseDuration(it->second, 86400);
    if (!interval) {
      throw ConfigError(fmt::format(
          "{}={} is not a number of seconds from 0 to 86400; give e.g. {}=30 (0: no rendezvous "
          "progress lines)",
          env::kProgressInterval, it->second, env::kProgressInterval));
    }
    r.progressInterval = *interval;
  }
  const NodeRange nodes = parseNnodes(nnodesText);
  r.minNodes = nodes.min;
  r.maxNodes = nodes.max;
  const auto step = o.standalone ? std::nullopt : slurmStep(env);
  const auto conf = RdzvConf::parse(o.rdzvConf);
  const bool etcd = (o.rdzvBackend == "etcd" || o.rdzvBackend == "etcd-v2") && !o.standalone;
  bool dynamic = (o.rdzvBackend == "c10d" || etcd) && !o.standalone;
  if (o.standalone && nodes.max > 1) {
    throw ConfigError(fmt::format(
        "--standalone runs a single node but --nnodes={}; drop one of the two", nnodesText));
  }
  Endpoint endpoint;
  if (etcd) {
    if (o.rdzvEndpoint.empty()) {
      throw ConfigError(fmt::format(
          "--rdzv_backend={} needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...], the etcd "
          "members' client addresses",
          o.rdzvBackend));
    }
    applyEtcd(o.rdzvEndpoint, conf, r);
  } else if (dynamic) {
    if (o.rdzvEndpoint.empty()) {
      throw ConfigError(
          "--rdzv_backend=c10d needs --rdzv_endpoint=HOST[:PORT], the store every node uses");
    }
    // Port 0 (torchrun's single-node "localhost:0"): a store on a free port,
    // which only this node can know.
    endpoint = parseEndpoint("rdzv_endpoint", o.rdzvEndpoint, kDefaultC10dPort, true);
    if (endpoint.port == 0) {
      if (nodes.max > 1) {
        throw ConfigError(fmt::format(
            "--rdzv_endpoint={} has port 0, which only a single-node job can use (other nodes "
            "cannot learn the port); give a port, e.g. --rdzv_endpoint={}:29400",
            o.rdzvEndpoint, endpoint.host));
      }
      dynamic = false;
    }
  }
  // Every key's value is checked, even where the mode does not use it.
  applyConf(conf, dynamic, r);
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
  r.localAddr = o.localAddr.empty() ? "" : parseHost("local_addr", o.localAddr);
  config.nnodes = nodes.max;
  // The workers' MASTER_PORT is a free port on the node that gets group rank
  // 0; --master_port names the store in static mode.
  config.masterPort = 0;
  if (dynamic) {
    r.mode = agent::RendezvousMode::kDynamic;
    r.endpointHost = endpoint.host;
    r.endpointPort = endpoint.port;
    // etcd: no ddprun store holds the rounds (etcd's own TLS and
    // certificates guard them); the workers' store is open like torchrun's.
    if (!etcd) r.token = sharedToken(conf, o.rdzvEndpoint, r.openStoreNotice);
    if (o.isGiven("node_rank")) {
      r.nodeRank = static_cast<int>(parseInteger(nodeRankText).value_or(-1));
      if (r.nodeRank < 0 || r.nodeRank >= nodes.max) {
        throw ConfigError(fmt::format("--node_rank={} is not from 0 to {} (--nnodes={})",
                                      nodeRankText, nodes.max - 1, nnodesText));
      }
    } else if (step && step->nodeRank < nodes.max) {
      // Rank 0 on the first host of the step's node list, as Slurm users
      // expect (torchrun sorts by host name).
      r.nodeRank = step->nodeRank;
    }
    fixNodesToTheStep(step, r);
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
  fixNodesToTheStep(step, r);
  if (masterAddr.empty()) {
    throw ConfigError("--master_addr is empty; give node 0's address, e.g. --master_addr=node1");
  }
  r.endpointHost = parseHost("master_addr", masterAddr);
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
  r.token = sharedToken(conf, hostPort(r.endpointHost, r.endpointPort), r.openStoreNotice);
  // Node 0 is reachable at MASTER_ADDR by definition.
  if (r.nodeRank == 0 && r.localAddr.empty()) r.localAddr = r.endpointHost;
  r.lastCallTimeout = std::chrono::milliseconds(0);
}

}  // namespace ddprun::launcher
