// The agent's features, built and registered in one place: FeatureSet
// builds every feature the configuration asks for, from one list
// (registry.cc), and carries what the composition root hands them all:
// the workers' environment contributions, each worker event, each round,
// and the facts features tell each other. Adding a feature is a folder of
// its own and one line in that list (docs/architecture.md, "Adding a
// feature").
//
// Thread-safety: the agent's loop thread only.
// Ownership: owns the features; the ports and the context's references
// outlive it.
#pragma once

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/agent/agent_config.h"
#include "ddprun/agent/core/feature.h"
#include "ddprun/agent/core/workers_store_view.h"

namespace ddprun::agent {

// What the factories build from: the configuration, where the node keeps
// its files, and the ports of the other rooms.
struct FeatureContext {
  boost::asio::io_context& io;
  const AgentConfig& config;
  const Environment& environment;      // what the workers inherit, before any contribution
  std::filesystem::path runDirectory;  // this launch's folder
  bool filesKept = false;              // the run directory outlives the run
  RunningWorkers& workers;
  const WorkersStoreView& workersStore;
  NodeCountersSink* jobStore = nullptr;  // several nodes: the job's store; else nullptr
  std::string processNotice;             // the workers' guard's notice ("": none)
  std::function<void()> flushConsole;    // before the failure report is printed
  // Where an attempt's flight recorder dumps are.
  std::function<std::filesystem::path(const Attempt&)> flightRecorderDir;
};

class FailureReportFeature;

class FeatureSet final : public FactSink,
                         public LifecycleInputs,
                         public ImportsLearner,
                         public AttemptEnvironment {
 public:
  explicit FeatureSet(FeatureContext context);
  ~FeatureSet() override;
  FeatureSet(const FeatureSet&) = delete;
  FeatureSet& operator=(const FeatureSet&) = delete;

  // Every feature's contribution to what the workers inherit, in order.
  void contributeEnvironment(Environment& env);
  // Every feature's contribution to one attempt's workers' environment.
  void contributeAttemptEnvironment(const Attempt& attempt, Environment& env) override;
  void workerEvent(const WorkerEvent& event);
  void roundAssigned(const rendezvous::protocol::Assignment& assigned);
  // Hands `fact` to every feature (the teller too).
  void tell(const FeatureFact& fact) override;

  // The lifecycle the features' inputs go to (registers every feature's
  // hook in the list's order), and --preload's zygote (may be null).
  void attach(NodeLifecycle& lifecycle, ImportsLearner* learner);
  // The failure report's text for the lifecycle (LifecycleSettings).
  std::string describeFailure(const GroupOutcome& outcome, const FailureContext& context) const;

  // LifecycleInputs, forwarded to the attached lifecycle.
  void noteProgress() override;
  void markUnhealthy() override;
  void fail(const std::string& report, int exitCode) override;
  // ImportsLearner, forwarded to the attached zygote.
  void learnProgramImports() override;

 private:
  NodeLifecycle* lifecycle_ = nullptr;
  ImportsLearner* learner_ = nullptr;
  std::vector<std::unique_ptr<Feature>> features_;
  FailureReportFeature* failureReport_ = nullptr;
};

}  // namespace ddprun::agent
