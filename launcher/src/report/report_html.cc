// `ddprun report RUN_DIR --html FILE`: one self-contained page (inline CSS
// and SVG, no script, no fetch): a timeline with a lane per node (its
// incidents, phase by phase) and per worker (each life: start, process
// group, first step, end), then the incidents and attempts as tables.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "report/report_format.h"
#include "report/run_timeline.h"

namespace ddprun::launcher::report {

namespace {

constexpr std::array<const char*, telemetry::kPhaseCount> kPhaseColors{
    "#e45756", "#f58518", "#eeca3b", "#b279a2", "#9d755d", "#72b7b2", "#54a24b"};
constexpr int kLabelWidth = 170, kPlotWidth = 1000, kRight = 20;
constexpr int kNodeLane = 26, kWorkerLane = 18, kAxis = 30;

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

class Scale {
 public:
  Scale(std::int64_t first, std::int64_t last)
      : first_(first), span_(std::max<std::int64_t>(last - first, 1)) {}
  double x(std::int64_t ms) const {
    return kLabelWidth + kPlotWidth *
                             static_cast<double>(std::clamp(ms - first_, std::int64_t{0}, span_)) /
                             static_cast<double>(span_);
  }
  double width(std::int64_t from, std::int64_t to) const { return std::max(x(to) - x(from), 1.0); }
  std::int64_t first() const { return first_; }
  std::int64_t span() const { return span_; }

 private:
  std::int64_t first_, span_;
};

void axis(std::ostringstream& svg, const Scale& scale, int height) {
  const double step = std::max(1.0, scale.span() / 8000.0);  // seconds, about 8 ticks
  static constexpr double kNice[] = {1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200};
  double tick = kNice[0];
  for (double nice : kNice) {
    tick = nice;
    if (nice >= step) break;
  }
  for (double s = 0; s * 1000 <= scale.span(); s += tick) {
    const double x = scale.x(scale.first() + static_cast<std::int64_t>(s * 1000));
    svg << fmt::format(
        R"(<line class="tick" x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}"/><text class="tick" x="{0:.1f}" y="{3}">+{4}</text>)",
        x, kAxis - 6, height, kAxis - 10, durationText(static_cast<std::int64_t>(s * 1000)));
  }
}

void nodeLane(std::ostringstream& svg, const Scale& scale, const NodeTimeline& node, int y) {
  svg << fmt::format(
      R"(<g class="lane node" data-host="{0}"><text class="label" x="6" y="{1}">{0}</text>)",
      escape(node.host), y + 17);
  svg << fmt::format(R"(<rect class="lane-bg" x="{}" y="{}" width="{}" height="{}"/>)", kLabelWidth,
                     y + 2, kPlotWidth, kNodeLane - 4);
  for (const auto& incident : node.incidents) {
    std::int64_t at = incident.beganMs;
    for (std::size_t i = 0; i < incident.phaseMs.size(); ++i) {
      if (!incident.phaseMs[i]) continue;
      const std::int64_t to = at + *incident.phaseMs[i];
      svg << fmt::format(
          R"(<rect class="phase" data-incident="{}" data-phase="{}" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>incident {} {}: {:.2f} s</title></rect>)",
          incident.number, telemetry::phaseName(telemetry::kPhases[i]), scale.x(at), y + 4,
          scale.width(at, to), kNodeLane - 8, kPhaseColors[i], incident.number,
          telemetry::phaseName(telemetry::kPhases[i]), *incident.phaseMs[i] / 1000.0);
      at = to;
    }
    if (incident.number > 0) {
      svg << fmt::format(
          R"(<path class="incident-mark" data-incident="{0}" d="M{1:.1f},{2} l-5,-7 h10 z"><title>incident {0} at {3}: {4}: {5}</title></path>)",
          incident.number, scale.x(incident.beganMs), y + 5, clockText(incident.beganMs),
          escape(incident.kind), escape(incident.cause));
    }
  }
  svg << "</g>";
}

void workerLane(std::ostringstream& svg, const Scale& scale, const NodeTimeline& node,
                int localRank, int y) {
  svg << fmt::format(
      R"(<g class="lane worker" data-host="{0}" data-local-rank="{1}"><text class="label small" x="18" y="{2}">local rank {1}</text>)",
      escape(node.host), localRank, y + 13);
  for (const auto& life : node.workers) {
    if (life.localRank != localRank) continue;
    const std::int64_t end = life.endMs.value_or(node.lastMs);
    const std::int64_t trainFrom = life.firstStepMs.value_or(end);
    const std::string cls = life.state.empty() ? "running" : life.state;
    const std::string tip = fmt::format(
        "rank {} (attempt {}, restart count {}): {} to {}{}", life.globalRank, life.attempt,
        life.restartCount, clockText(life.startMs), clockText(end),
        life.state.empty() ? std::string()
                           : fmt::format(", {}{}", life.state,
                                         life.exitCode ? fmt::format(" (exit {})", *life.exitCode)
                                                       : std::string()));
    svg << fmt::format(
        R"(<rect class="life startup" data-rank="{}" x="{:.1f}" y="{}" width="{:.1f}" height="{}"><title>{} - starting</title></rect>)",
        life.globalRank, scale.x(life.startMs), y + 3, scale.width(life.startMs, trainFrom),
        kWorkerLane - 6, escape(tip));
    if (life.firstStepMs) {
      svg << fmt::format(
          R"(<rect class="life training" data-rank="{}" x="{:.1f}" y="{}" width="{:.1f}" height="{}"><title>{} - training</title></rect>)",
          life.globalRank, scale.x(trainFrom), y + 3, scale.width(trainFrom, end), kWorkerLane - 6,
          escape(tip));
    }
    if (life.processGroupMs) {
      svg << fmt::format(
          R"(<line class="pg-mark" data-rank="{0}" x1="{1:.1f}" y1="{2}" x2="{1:.1f}" y2="{3}"><title>rank {0}: process group formed at {4}</title></line>)",
          life.globalRank, scale.x(*life.processGroupMs), y + 1, y + kWorkerLane - 1,
          clockText(*life.processGroupMs));
    }
    if (life.state == "FAILED") {
      svg << fmt::format(
          R"(<path class="fail-mark" data-rank="{0}" d="M{1:.1f},{2} m-4,-4 l8,8 m0,-8 l-8,8"><title>rank {0} failed at {3}{4}</title></path>)",
          life.globalRank, scale.x(end), y + kWorkerLane / 2, clockText(end),
          life.exitCode ? fmt::format(" with exit code {}", *life.exitCode) : std::string());
    }
  }
  svg << "</g>";
}

const char* kStyle = R"(body{font:14px system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#555;margin:2px 0}
svg text{font:12px system-ui,sans-serif;fill:#222}svg text.small{font-size:11px;fill:#555}
svg text.tick{font-size:10px;fill:#777;text-anchor:middle}
line.tick{stroke:#ddd}.lane-bg{fill:#f4f4f4}
.life.startup{fill:#c6dbef}.life.training{fill:#3182bd}
.pg-mark{stroke:#08306b;stroke-width:2}.fail-mark{stroke:#d62728;stroke-width:2.5;fill:none}
.incident-mark{fill:#d62728}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f0f0f0}.legend span{display:inline-block;margin-right:14px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
)";

}  // namespace

std::string formatReportHtml(const RunTimeline& run) {
  const Scale scale(run.firstMs, run.lastMs);
  int height = kAxis;
  for (const auto& node : run.nodes) {
    int ranks = 0;
    for (const auto& life : node.workers) ranks = std::max(ranks, life.localRank + 1);
    height += kNodeLane + ranks * kWorkerLane + 8;
  }
  std::ostringstream svg;
  svg << fmt::format(
      R"(<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" aria-label="timeline">)",
      kLabelWidth + kPlotWidth + kRight, height + 4);
  axis(svg, scale, height);
  int y = kAxis;
  for (const auto& node : run.nodes) {
    nodeLane(svg, scale, node, y);
    y += kNodeLane;
    int ranks = 0;
    for (const auto& life : node.workers) ranks = std::max(ranks, life.localRank + 1);
    for (int rank = 0; rank < ranks; ++rank, y += kWorkerLane)
      workerLane(svg, scale, node, rank, y);
    y += 8;
  }
  svg << "</svg>";

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ddprun report: "
       << escape(run.runId) << "</title><style>" << kStyle << "</style></head><body>\n";
  html << "<h1>ddprun report: " << escape(run.runId) << "</h1>\n";
  html << fmt::format("<p class=\"meta\">{} node{}, {} ({} to {} UTC)</p>\n", run.nodes.size(),
                      run.nodes.size() == 1 ? "" : "s", durationText(run.lastMs - run.firstMs),
                      clockText(run.firstMs), clockText(run.lastMs));
  for (const auto& node : run.nodes) {
    html << "<p class=\"meta node-summary\" data-host=\"" << escape(node.host) << "\"><b>"
         << escape(node.host) << "</b>: " << escape(outcomeText(node));
    if (node.downtime) {
      html << fmt::format(" &mdash; <span class=\"goodput\" data-goodput=\"{:.4f}\">",
                          node.downtime->goodput.value_or(0))
           << escape(downtimeText(*node.downtime)) << "</span>";
    }
    html << "</p>\n";
  }
  html << "<p class=\"legend\">";
  for (telemetry::Phase phase : telemetry::kPhases) {
    html << fmt::format("<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>",
                        kPhaseColors[telemetry::index(phase)], telemetry::phaseName(phase));
  }
  html << "<span><i class=\"swatch\" style=\"background:#c6dbef\"></i>starting</span>"
          "<span><i class=\"swatch\" style=\"background:#3182bd\"></i>training</span>"
          "<span style=\"color:#08306b\">| process group</span>"
          "<span style=\"color:#d62728\">&#x2715; failed</span></p>\n";
  html << svg.str() << "\n";
  html << "<h2>Incidents</h2>\n<table id=\"incidents\"><tr><th>node</th><th>#</th><th>at "
          "(UTC)</th><th>what</th><th>when</th><th>lost</th><th>phases (s)</th></tr>\n";
  for (const auto& node : run.nodes) {
    for (const auto& incident : node.incidents) {
      html << fmt::format(
          "<tr class=\"incident\" data-incident=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}: "
          "{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          incident.number, escape(node.host), incident.number, clockText(incident.beganMs),
          escape(incident.kind), escape(incident.cause),
          incident.number == 0 ? "the start"
          : incident.startup   ? "at startup"
                               : "after training began",
          durationText(incident.lostMs) + (incident.complete ? "" : " (did not resume)"),
          escape(phasesText(incident.phaseMs)));
    }
  }
  html << "</table>\n<h2>Attempts</h2>\n<table id=\"attempts\"><tr><th>node</th><th>attempt</th>"
          "<th>restart count</th><th>workers</th><th>from</th><th>to</th><th>ending</th></tr>\n";
  for (const auto& node : run.nodes) {
    for (const auto& a : attemptsOf(node)) {
      html << fmt::format(
          "<tr class=\"attempt\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</"
          "td><td>{}</td></tr>\n",
          escape(node.host), a.attempt, a.restartCount, a.workers, clockText(a.startMs),
          clockText(a.endMs), escape(a.ending));
    }
  }
  html << "</table>\n</body></html>\n";
  return html.str();
}

}  // namespace ddprun::launcher::report
