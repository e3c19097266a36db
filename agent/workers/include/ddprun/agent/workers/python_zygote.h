// PythonZygote: --preload's Python process on this node. It imports
// modules once (never CUDA, never a thread) and forks every worker from that
// state, at launch and at each restart, so a Python worker starts without
// importing torch again (docs/cli.md, --preload).
//
// Two policies. Strict (--preload MODULES): the listed modules; one that
// cannot be imported, or whose import is unsafe, ends the launch (onFatal).
// Automatic (--preload auto, the default for Python programs): torch and
// what the installed PyTorch's first DDP step imports lazily, then what the
// program itself imported (learnProgramImports(), once the progress hook
// wrote them at the first step: the zygote imports them between requests
// while the job trains). A module that fails is left out with one warning;
// one whose import was unsafe (a thread, a process, CUDA, a GPU device
// opened) too, and the zygote is rebuilt without it; if torch itself cannot
// be preloaded, workers are exec'd (one warning). Auto never fails a job.
//
// The agent starts it as soon as it starts, so the import overlaps the
// rendezvous; the first worker group waits for whenReady(). Its program is
// preload_zygote.py (embedded in ddprun, written into the run directory).
// Each worker it forks is the agent's own child (clone3 CLONE_PARENT, born
// in the worker group's cgroup) with its process group, death-of-parent
// protection, environment, working directory, pipes and CPU placement, so
// exit codes, signals, logs and the orphan guarantees are those of an
// exec'd worker. A zygote that dies after it was ready is replaced (workers
// it forked run on: they are not its children); one that fails before, or
// whose modules start a thread at import, is fatal if it is the first: onFatal
// gets the reason (a replacement that fails is counted; after three in a row
// ddprun stops replacing them and execs workers).
// When it cannot fork (dead, replaced, not ready), fork() answers nullopt and
// the worker is exec'd as without --preload.
//
// Thread-safety: the agent's loop thread only. fork() blocks that thread
// for one request (a fork of the zygote, milliseconds; bounded by a
// timeout).
// Ownership: owns the zygote process and the agent's end of its socket.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/workers/orphan_guard.h"
#include "ddprun/agent/workers/worker_process.h"

namespace ddprun::agent {

class PythonZygote : public ImportsLearner {
 public:
  struct Settings {
    // The workers' command: PYTHON -u SCRIPT ARGS... or PYTHON -u -m MODULE ARGS...
    std::vector<std::string> command;
    std::vector<std::string> modules;  // strict: imported once, in this order
    bool automatic = false;            // --preload auto
    std::vector<std::string> env;      // the zygote's own environment, KEY=VALUE
    std::filesystem::path scriptPath;  // where its program is written
    // auto: where the progress hook writes the program's imports
    // (DDPRUN_PRELOAD_LEARN), and where the zygote's list is written for a
    // replacement.
    std::filesystem::path learnedPath;
    std::filesystem::path modulesPath;
  };
  // Gets the launch's one-line error report ("ddprun: error: --preload ...").
  using FatalFn = std::function<void(const std::string& report)>;

  PythonZygote(boost::asio::io_context& io, OrphanGuard& guard, Settings settings, FatalFn onFatal);
  ~PythonZygote() override;
  PythonZygote(const PythonZygote&) = delete;
  PythonZygote& operator=(const PythonZygote&) = delete;

  bool ready() const { return ready_; }
  // A zygote is importing: worker groups should wait for it.
  bool starting() const { return !ready_ && !fatal_ && !gaveUp_; }
  // Runs `then` once the zygote is ready, or ddprun gave up forking
  // workers (they are exec'd): now, if so. Not run if the zygote is fatal.
  void whenReady(std::function<void()> then);
  // The Forker workers are started with (see WorkerProcess).
  const Forker& forker() const { return forker_; }
  // auto: the progress hook wrote the program's imports (learnedPath): the
  // zygote imports them in the background. Once a launch (the hook reports
  // at the first step); no-op when strict.
  void learnProgramImports() override;

 private:
  void start();
  void readNotice();
  void onNotice(const std::vector<std::string>& fields);
  void onExit(ExitStatus status);
  // The modules of the next zygote's command line.
  std::string modulesArgument() const;
  // The report onFatal gets: "ddprun: error: --preload MODULES: why\n".
  std::string fatalReport(const std::string& why) const;
  // auto: torch itself could not be preloaded: workers are exec'd.
  void withoutZygote(const std::string& why);
  std::optional<pid_t> fork(const ForkRequest& request);
  // One request on the control socket and its reply's fields; nullopt (the
  // zygote discarded) when it could not be asked.
  std::optional<std::vector<std::string>> ask(const std::string& body, const std::vector<int>& fds);
  // Gives up on the current zygote (it is killed; onExit replaces it).
  void discard(const std::string& why);
  // Stops replacing zygotes: workers are exec'd from now on.
  void giveUp(const std::string& why);

  boost::asio::io_context& io_;
  OrphanGuard& guard_;
  const Settings settings_;
  FatalFn onFatal_;
  Forker forker_;
  const std::set<std::string> zygoteEnv_;  // settings_.env, for lookups
  std::unique_ptr<WorkerProcess> process_;
  std::unique_ptr<boost::asio::local::stream_protocol::socket> socket_;   // requests
  std::unique_ptr<boost::asio::local::stream_protocol::socket> notices_;  // the zygote's own
  std::vector<std::function<void()>> waiting_;
  std::vector<char> notice_;
  // auto: the program's imports (learned once) and the modules left out.
  std::vector<std::string> learned_;
  std::set<std::string> excluded_;
  int reports_ = 0;       // learnProgramImports() calls
  bool tainted_ = false;  // this zygote's import was unsafe: rebuilt without it
  bool ready_ = false;
  bool readyOnce_ = false;  // this zygote was ready
  bool everReady_ = false;  // a zygote was: from then on failures are not fatal
  bool counted_ = false;    // this zygote's failure is in unusableInARow_
  bool fatal_ = false;
  bool stopping_ = false;
  // Zygotes in a row that were ready but could not fork: at kMaxUnusable
  // ddprun stops replacing them and execs the workers.
  int unusableInARow_ = 0;
  bool gaveUp_ = false;
  // Bumped by every start: exit handlers of an older zygote do nothing.
  std::shared_ptr<int> life_;
};

// The zygote of --preload for `config`'s workers: their command and the
// modules or auto, the environment every worker shares (`baseEnv` with
// config.extraEnv, read by libraries at import, plus PyTorch's and Triton's
// NVML-based CUDA checks and, with auto, DDPRUN_PRELOAD_LEARN for the
// progress hook, none of which the workers get unless `baseEnv` has them),
// and its program written into `runDirectory`.
PythonZygote::Settings zygoteSettings(const AgentConfig& config,
                                      const std::map<std::string, std::string>& baseEnv,
                                      const std::filesystem::path& runDirectory);

// --preload's zygote as the lifecycle's start gate: a group starts once the
// zygote imported the modules (or gave up: then workers are exec'd).
class ZygoteGate : public StartGate {
 public:
  explicit ZygoteGate(PythonZygote& zygote) : zygote_(zygote) {}
  bool ready() const override { return !zygote_.starting(); }
  void whenReady(std::function<void()> then) override { zygote_.whenReady(std::move(then)); }

 private:
  PythonZygote& zygote_;
};

}  // namespace ddprun::agent
