#include "report/report_command.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "ddprun/common/error.h"
#include "report/run_timeline.h"

namespace ddprun::launcher {

int runReportCommand(int argc, char** argv) {
  CLI::App app{"ddprun report: a run's incidents, phases and goodput, as text or one HTML page",
               "ddprun report"};
  std::string runDir, htmlFile;
  app.add_option("RUN_DIR", runDir,
                 "the run's --log_dir, one node's run directory in it, or an event log file")
      ->required();
  app.add_option("--html", htmlFile, "also write a self-contained HTML page with the timeline");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  report::RunTimeline run;
  try {
    run = report::loadRunTimeline(runDir);
  } catch (const ConfigError& e) {
    std::cerr << "ddprun report: error: " << e.what() << "\n";
    return 2;
  }
  std::cout << report::formatReportText(run);
  if (!htmlFile.empty()) {
    std::ofstream out(htmlFile, std::ios::trunc);
    out << report::formatReportHtml(run);
    if (!out.flush()) {
      std::cerr << "ddprun report: error: cannot write " << htmlFile << ": " << std::strerror(errno)
                << "\n";
      return 1;
    }
    std::cout << "The page is " << htmlFile << "\n";
  }
  return 0;
}

}  // namespace ddprun::launcher
