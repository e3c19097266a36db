#include "report/run_timeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "ddprun/common/error.h"

namespace ddprun::launcher::report {

namespace {

using nlohmann::json;

std::string metaText(const json& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return {};
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::optional<std::int64_t> metaNumber(const json& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

// The event's metadata as the agent wrote it: every value as text.
telemetry::Metadata metadataOf(const json& meta) {
  telemetry::Metadata out;
  if (!meta.is_object()) return out;
  for (const auto& [key, value] : meta.items()) {
    out[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return out;
}

int metaInteger(const json& meta, const char* key, int otherwise = 0) {
  return static_cast<int>(metaNumber(meta, key).value_or(otherwise));
}

class Builder {
 public:
  // `source`: the file it came from. Each agent writes its own file, so
  // a file is a node, whatever the host names (two agents on one host).
  void add(const json& event, std::size_t source) {
    const std::string name = event.value("name", "");
    const json& meta = event["metadata"];
    const std::int64_t at = event["timestamp"].get<std::int64_t>();
    if (run_.runId.empty()) run_.runId = metaText(meta, "run_id");
    NodeTimeline& node = nodeOf(source, metaText(meta, "hostname"), at);
    constexpr std::string_view kWorker = "torchelastic.worker.status.";
    constexpr std::string_view kAgent = "torchelastic.agent.status.";
    if (name.starts_with(kWorker)) {
      const std::string state = name.substr(kWorker.size());
      const int localRank = metaInteger(meta, "local_rank");
      if (state == "START") {
        WorkerLife life;
        life.localRank = localRank;
        life.globalRank = metaInteger(meta, "global_rank");
        life.restartCount = metaInteger(meta, "agent_restarts");
        for (const auto& earlier : node.workers) {
          if (earlier.localRank == localRank) ++life.attempt;
        }
        life.startMs = at;
        node.workers.push_back(life);
      } else if (WorkerLife* life = latest(node, localRank)) {
        life->endMs = at;
        life->state = state;
        life->exitCode = metaNumber(meta, "exit_code");
        life->rawError = metaText(meta, "raw_error");
      }
    } else if (name == telemetry::kProcessGroupEvent || name == telemetry::kFirstStepEvent) {
      if (WorkerLife* life = latest(node, metaInteger(meta, "local_rank"))) {
        (name == telemetry::kProcessGroupEvent ? life->processGroupMs : life->firstStepMs) = at;
      }
    } else if (name == telemetry::kIncidentEvent) {
      const IncidentRecord incident = telemetry::incidentFromMetadata(metadataOf(meta));
      node.incidents.push_back(incident);
      widen(node, incident.beganMs);
    } else if (name == telemetry::kDowntimeEvent) {
      node.downtime = telemetry::downtimeFromMetadata(metadataOf(meta));
      // The node started elapsed_ms before this record.
      widen(node, at - node.downtime->elapsedMs);
    } else if (name.starts_with(kAgent)) {
      node.exitCode = metaInteger(meta, "exit_code");
    }
  }

  RunTimeline finish() {
    // Hosts named twice are told apart by their run directory.
    std::map<std::string, int> named;
    for (const auto& [source, node] : nodes_) ++named[node.host];
    for (auto& [source, node] : nodes_) {
      if (named[node.host] > 1) {
        node.host += " (" + run_.sources[source].parent_path().filename().string() + ")";
      }
    }
    bool first = true;
    for (auto& [source, node] : nodes_) {
      run_.firstMs = first ? node.firstMs : std::min(run_.firstMs, node.firstMs);
      run_.lastMs = first ? node.lastMs : std::max(run_.lastMs, node.lastMs);
      first = false;
      run_.nodes.push_back(std::move(node));
    }
    return std::move(run_);
  }

  RunTimeline run_;

 private:
  NodeTimeline& nodeOf(std::size_t source, const std::string& host, std::int64_t at) {
    auto [it, inserted] = nodes_.try_emplace(source);
    if (inserted) {
      it->second.host = host;
      it->second.firstMs = it->second.lastMs = at;
    }
    widen(it->second, at);
    return it->second;
  }
  static void widen(NodeTimeline& node, std::int64_t at) {
    node.firstMs = std::min(node.firstMs, at);
    node.lastMs = std::max(node.lastMs, at);
  }
  static WorkerLife* latest(NodeTimeline& node, int localRank) {
    for (auto it = node.workers.rbegin(); it != node.workers.rend(); ++it) {
      if (it->localRank == localRank) return &*it;
    }
    return nullptr;
  }

  std::map<std::size_t, NodeTimeline> nodes_;  // by source file
};

std::vector<std::filesystem::path> eventFiles(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) {
    throw ConfigError(fmt::format(
        "{} is neither a run directory nor an event log; give a run's log directory (--log_dir) "
        "or its events.jsonl",
        path.string()));
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(
           path, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() > 3) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->path().filename() == "events.jsonl" && it->is_regular_file(ec)) {
      files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw ConfigError(fmt::format(
        "no events.jsonl under {}: give the --log_dir a run was started with, or one node's run "
        "directory in it",
        path.string()));
  }
  return files;
}

}  // namespace

RunTimeline loadRunTimeline(const std::filesystem::path& path) {
  Builder builder;
  std::vector<std::pair<json, std::size_t>> events;  // and its file
  for (const auto& file : eventFiles(path)) {
    std::ifstream in(file);
    if (!in) throw ConfigError(fmt::format("cannot read {}", file.string()));
    builder.run_.sources.push_back(file);
    std::string line;
    while (std::getline(in, line)) {
      json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!event.is_object() || !event.contains("name") || !event["name"].is_string() ||
          !event.contains("timestamp") || !event["timestamp"].is_number_integer() ||
          !event.contains("metadata") || !event["metadata"].is_object()) {
        ++builder.run_.unreadLines;
        continue;
      }
      events.emplace_back(std::move(event), builder.run_.sources.size() - 1);
    }
  }
  if (events.empty()) {
    throw ConfigError(fmt::format("{} holds no ddprun events", path.string()));
  }
  // Nodes' files interleave: one order for all (a worker's end after its start).
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.first["timestamp"].template get<std::int64_t>() <
           b.first["timestamp"].template get<std::int64_t>();
  });
  for (const auto& [event, source] : events) builder.add(event, source);
  return builder.finish();
}

}  // namespace ddprun::launcher::report
