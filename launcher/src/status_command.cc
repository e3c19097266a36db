#include "status_command.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "ddprun/common/env.h"
#include "ddprun/common/error.h"
#include "ddprun/common/node_telemetry.h"
#include "ddprun/common/secret.h"
#include "ddprun/rendezvous/etcd_rendezvous.h"
#include "ddprun/rendezvous/rendezvous_client.h"
#include "endpoint.h"
#include "rdzv_conf.h"
#include "rendezvous_options.h"

namespace ddprun::launcher {

namespace {

using rendezvous::protocol::NodeCounters;
using rendezvous::protocol::RendezvousStatus;

struct StatusOptions {
  std::string endpoint;
  std::string rdzvId;
  std::string backend = "c10d";
  std::string conf;
  bool json = false;
};

std::unique_ptr<rendezvous::RendezvousBackend> connect(const StatusOptions& o) {
  const auto conf = RdzvConf::parse(o.conf);
  if (o.backend == "etcd" || o.backend == "etcd-v2") {
    agent::RendezvousConfig r;
    applyEtcd(o.endpoint, conf, r);
    rendezvous::EtcdRendezvousOptions options;
    options.etcd = r.etcd;
    options.rdzvId = o.rdzvId;  // no node id: an observer, no lease
    return std::make_unique<rendezvous::EtcdRendezvous>(options);
  }
  if (o.backend != "c10d" && o.backend != "static") {
    throw ConfigError(
        fmt::format("--rdzv_backend={} is not c10d, static, etcd or etcd-v2", o.backend));
  }
  const Endpoint e = parseEndpoint("rdzv_endpoint", o.endpoint, 29400);
  rendezvous::StoreClientOptions options;
  options.host = e.host;
  options.port = e.port;
  options.name = "ddprun-status";
  if (auto file = conf.text("token_file")) {
    options.token = readTokenFile(*file);
  } else if (auto token = tokenFromEnv(env::kToken)) {
    options.token = *token;
  }
  options.connectTimeout = std::chrono::seconds(3);
  return std::make_unique<rendezvous::RendezvousClient>(options);
}

std::string utc(std::int64_t ms) {
  if (ms <= 0) return "unknown time";
  const std::chrono::system_clock::time_point t{std::chrono::milliseconds(ms)};
  return fmt::format("{:%Y-%m-%d %H:%M:%S} UTC",
                     std::chrono::time_point_cast<std::chrono::seconds>(t));
}

std::string stateOf(const RendezvousStatus& st) {
  return st.closed ? "failed" : st.running ? "running" : "forming";
}

// Each member's counters of one kind (its relay's, docs/multinode.md "The
// node relay"; its downtime's, docs/operations.md), in the members' order;
// "" for a node without.
using NodeTexts = std::vector<std::string>;

// Member i's relay (nullopt: none published).
std::optional<telemetry::RelayTotals> relayOf(const NodeTexts& texts, std::size_t i) {
  if (i >= texts.size()) return std::nullopt;
  return telemetry::decodeRelayCounters(texts[i]);
}

// Member i's downtime (nullopt: none published).
std::optional<telemetry::DowntimeCounters> downtimeOf(const NodeTexts& texts, std::size_t i) {
  if (i >= texts.size()) return std::nullopt;
  return telemetry::decodeDowntimeCounters(texts[i]);
}

// The downtime's totals for JSON (null: none published).
nlohmann::json downtimeJson(const std::optional<telemetry::DowntimeCounters>& d) {
  if (!d) return nullptr;
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, value] : telemetry::namedTotals(*d)) json[name] = value;
  const auto goodput = d->goodput();  // none: no step reported yet (unknown, not 0)
  json["goodput"] = goodput ? nlohmann::json(*goodput) : nlohmann::json(nullptr);
  return json;
}

// "2 incidents, 4.1 s lost, goodput 93.1 %" or "-".
std::string downtimeCell(const std::optional<telemetry::DowntimeCounters>& d) {
  if (!d) return "-";
  const auto goodput = d->goodput();
  return fmt::format("{} incident{}, {:.1f} s lost, goodput {}", d->incidents,
                     d->incidents == 1 ? "" : "s", static_cast<double>(d->lostMs) / 1000.0,
                     goodput ? fmt::format("{:.1f} %", 100 * *goodput)
                             : std::string("unknown (no step reported)"));
}

nlohmann::json toJson(const StatusOptions& o, const RendezvousStatus& st, const NodeTexts& relays,
                      const NodeTexts& downtimes) {
  nlohmann::json members = nlohmann::json::array();
  for (std::size_t i = 0; i < st.members.size(); ++i) {
    const auto& m = st.members[i];
    nlohmann::json relay = nullptr;
    if (const auto counters = relayOf(relays, i)) {
      relay = nlohmann::json::object();
      for (const auto& [name, value] : telemetry::namedTotals(*counters)) relay[name] = value;
    }
    members.push_back({{"node_id", m.nodeId},
                       {"address", m.address},
                       {"node_rank", m.groupRank >= 0 ? nlohmann::json(m.groupRank) : nullptr},
                       {"local_world_size", m.localWorldSize},
                       {"state", m.groupRank >= 0 ? "running" : "waiting"},
                       {"relay", relay},
                       {"downtime", downtimeJson(downtimeOf(downtimes, i))}});
  }
  nlohmann::json failure = nullptr;
  if (!st.lastFailure.nodeId.empty()) {
    failure = {{"node_id", st.lastFailure.nodeId},
               {"round", st.lastFailure.round},
               {"exit_code", st.lastFailure.exitCode},
               {"failed_at_ms", st.lastFailure.failedAtMs},
               {"report", st.lastFailure.report}};
  }
  return {{"rdzv_id", o.rdzvId},      {"endpoint", o.endpoint},
          {"backend", o.backend},     {"state", stateOf(st)},
          {"round", st.round},        {"min_nodes", st.minNodes},
          {"max_nodes", st.maxNodes}, {"joined", st.joined},
          {"restarts", st.restarts},  {"max_restarts", st.maxRestarts},
          {"members", members},       {"missing", st.missing},
          {"last_failure", failure}};
}

// "8 workers, 48 requests: 9 to the store, 30 reads shared, 9 ADDs combined,
// 2.1 KB not sent" or "-".
std::string relayCell(const std::optional<telemetry::RelayTotals>& c) {
  if (!c) return "-";
  return fmt::format(
      "{} workers, {} requests: {} to the store, {} reads shared, {} ADDs combined, "
      "{:.1f} KB not sent",
      c->connections, c->requests, c->upstreamRequests, c->sharedReads, c->addsCombined,
      static_cast<double>(c->bytesSaved) / 1024);
}

void printTable(const StatusOptions& o, const RendezvousStatus& st, const NodeTexts& relays,
                const NodeTexts& downtimes) {
  std::cout << fmt::format("rendezvous '{}' at {} ({}): round {} {}, {} to {} nodes\n", o.rdzvId,
                           o.endpoint, o.backend, st.round, stateOf(st), st.minNodes, st.maxNodes);
  std::cout << fmt::format("restarts: {} of {} used\n", st.restarts, st.maxRestarts);
  std::size_t width = 4;
  for (const auto& m : st.members) width = std::max(width, m.nodeId.size());
  std::vector<std::string> downtimeCells;
  std::size_t downtimeWidth = 8;
  for (std::size_t i = 0; i < st.members.size(); ++i) {
    downtimeCells.push_back(downtimeCell(downtimeOf(downtimes, i)));
    downtimeWidth = std::max(downtimeWidth, downtimeCells.back().size());
  }
  std::cout << fmt::format("{:<9} {:<{}} {:<16} {:<7} {:<{}} {}\n", "NODE_RANK", "NODE", width,
                           "ADDRESS", "WORKERS", "DOWNTIME", downtimeWidth, "RELAY");
  for (std::size_t i = 0; i < st.members.size(); ++i) {
    const auto& m = st.members[i];
    std::cout << fmt::format("{:<9} {:<{}} {:<16} {:<7} {:<{}} {}\n",
                             m.groupRank >= 0 ? std::to_string(m.groupRank) : "waiting", m.nodeId,
                             width, m.address, m.localWorldSize, downtimeCells[i], downtimeWidth,
                             relayCell(relayOf(relays, i)));
  }
  if (st.members.empty()) std::cout << "(no node has joined the round being formed)\n";
  if (!st.missing.empty()) {
    std::cout << "missing:" << rendezvous::protocol::missingNodesText(st).substr(10) << "\n";
  }
  if (st.lastFailure.nodeId.empty()) {
    std::cout << "last failure: none\n";
    return;
  }
  const auto& f = st.lastFailure;
  std::cout << fmt::format("last failure: node {} in round {}, exit code {}, at {}\n", f.nodeId,
                           f.round, f.exitCode, utc(f.failedAtMs));
  std::cout << f.report;
  if (!f.report.empty() && f.report.back() != '\n') std::cout << "\n";
}

}  // namespace

int runStatusCommand(int argc, char** argv) {
  StatusOptions o;
  CLI::App app{"ddprun status: a job's rendezvous (round, members, restarts, last failure)",
               "ddprun status"};
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", o.endpoint,
                 "the job's store (HOST[:PORT]) or etcd members (h1:2379,h2:2379)")
      ->required();
  app.add_option("--rdzv_id,--rdzv-id", o.rdzvId, "the job's --rdzv_id")->required();
  app.add_option("--rdzv_backend,--rdzv-backend", o.backend, "c10d (default), static or etcd");
  app.add_option("--rdzv_conf,--rdzv-conf", o.conf,
                 "token_file=..., or etcd's protocol, ca_cert, cert, key, etcd_prefix");
  app.add_flag("--json", o.json, "print JSON for tools");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  RendezvousStatus st;
  NodeTexts relays, downtimes;
  std::optional<std::chrono::seconds> expiresIn;  // etcd: the job's keys, left alone
  try {
    auto backend = connect(o);
    st = backend->status(o.rdzvId, true);
    std::vector<std::string> nodeIds;
    for (const auto& m : st.members) nodeIds.push_back(m.nodeId);
    relays = backend->nodeCounters(NodeCounters::kRelay, o.rdzvId, nodeIds);
    downtimes = backend->nodeCounters(NodeCounters::kDowntime, o.rdzvId, nodeIds);
    if (st.exists) expiresIn = backend->jobExpiresIn(o.rdzvId);
  } catch (const ConfigError& e) {
    std::cerr << "ddprun status: error: " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "ddprun status: error: " << e.what() << "\n";
    return 1;
  }
  if (!st.exists) {
    std::cerr << fmt::format(
        "ddprun status: no rendezvous '{}' at {}: no node has joined it (or the job ended); check "
        "--rdzv_id\n",
        o.rdzvId, o.endpoint);
    return 1;
  }
  if (o.json) {
    auto json = toJson(o, st, relays, downtimes);
    if (expiresIn) json["expires_in_s"] = expiresIn->count();
    std::cout << json.dump(2) << "\n";
  } else {
    printTable(o, st, relays, downtimes);
    if (expiresIn) {
      std::cout << fmt::format(
          "etcd keys: renewed while a node of the job runs; with none, they expire in {} s "
          "(rdzv_conf job_ttl)\n",
          expiresIn->count());
    }
  }
  return 0;
}

}  // namespace ddprun::launcher
