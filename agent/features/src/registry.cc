#include "ddprun/agent/features/registry.h"

#include "ddprun/agent/features/downtime/downtime_feature.h"
#include "ddprun/agent/features/event_log/event_log_feature.h"
#include "ddprun/agent/features/failure_report/failure_report_feature.h"
#include "ddprun/agent/features/file_timer/file_timer_feature.h"
#include "ddprun/agent/features/flight_recorder/flight_recorder_setup.h"
#include "ddprun/agent/features/hang_watchdog/hang_watchdog_feature.h"
#include "ddprun/agent/features/node_notes/node_notes.h"
#include "ddprun/agent/features/node_notes/trained_alone_note.h"
#include "ddprun/agent/features/uninterruptible/uninterruptible_feature.h"

namespace ddprun::agent {

namespace {

// Each feature's slice of the configuration.
EventLogFeature::Settings eventLogSettings(const AgentConfig& c) {
  const auto& r = c.rendezvous;
  return {c.output.eventLog,
          c.runId,
          c.hostname,
          c.role,
          r.backend == RendezvousBackendKind::kEtcd ? "etcd"
          : r.mode == RendezvousMode::kDynamic      ? "c10d"
                                                    : "static",
          c.restarts.maxRestarts};
}

FailureReportFeature::Settings failureReportSettings(const AgentConfig& c, bool filesKept) {
  return {c.programName,
          c.restarts.maxRestarts,
          c.rendezvous.mode != RendezvousMode::kStandalone,
          c.hostname,
          c.rendezvous.localAddr,
          c.pythonProgram && !c.command.empty() ? c.command.front() : "",
          filesKept};
}

template <typename T>
T& add(std::vector<std::unique_ptr<Feature>>& list, std::unique_ptr<T> feature) {
  T& added = *feature;
  list.push_back(std::move(feature));
  return added;
}

}  // namespace

// The list: every feature, in the order it sees each step. The failure
// report comes before the launcher's error file, the downtime's summary
// before the event log's status.
FeatureSet::FeatureSet(FeatureContext c) {
  const AgentConfig& config = c.config;
  const FeaturePorts ports{*this, c.workers, *this};
  auto events = std::make_unique<EventLogFeature>(eventLogSettings(config), c.runDirectory);
  auto downtime =
      std::make_unique<DowntimeFeature>(c.io, c.runDirectory, config.selfHealing.progressHook,
                                        config.nprocPerNode, ports, *events, *this);
  const bool multiNode = config.rendezvous.mode != RendezvousMode::kStandalone;
  add(features_,
      std::make_unique<JobNotices>(multiNode, config.rendezvous.openStoreNotice, c.processNotice));
  if (config.selfHealing.watchdogTimeout.count() > 0) {
    add(features_, std::make_unique<HangWatchdogFeature>(c.io, config.selfHealing.watchdogTimeout,
                                                         c.workers, *this));
  }
  if (config.selfHealing.uninterruptibleStateTimeout.count() > 0) {
    add(features_, std::make_unique<UninterruptibleFeature>(
                       c.io, config.selfHealing.uninterruptibleStateTimeout, c.workers, *this));
  }
  add(features_, std::make_unique<TrainedAloneNote>(
                     TrainedAloneNote::Settings{config.pythonProgram && config.useAgentStore,
                                                config.nprocPerNode},
                     c.workersStore));
  add(features_, std::make_unique<RelayLossNote>(c.workers));
  if (auto timer = FileTimerFeature::fromEnvironment(c.io, c.environment, c.runDirectory, c.workers,
                                                     *this)) {
    add(features_, std::move(timer));
  }
  add(features_, std::make_unique<FlightRecorderSetup>(c.flightRecorderDir));
  failureReport_ = &add(features_, std::make_unique<FailureReportFeature>(
                                       failureReportSettings(config, c.filesKept),
                                       std::move(c.flushConsole), std::move(c.flightRecorderDir)));
  if (config.output.launcherErrorFile) {
    add(features_, std::make_unique<LauncherErrorFileFeature>(*config.output.launcherErrorFile));
  }
  if (c.jobStore != nullptr) add(features_, std::make_unique<TheJobStoresCounters>(*c.jobStore));
  if (!multiNode && config.rendezvous.metricsPort > 0) {
    add(features_, std::make_unique<NodeMetricsFeature>(
                       c.io, static_cast<std::uint16_t>(config.rendezvous.metricsPort),
                       config.runId, config.hostname, *downtime));
  }
  add(features_, std::move(downtime));
  add(features_, std::move(events));
}

FeatureSet::~FeatureSet() = default;

void FeatureSet::contributeEnvironment(Environment& env) {
  for (auto& feature : features_) feature->contributeEnvironment(env);
}

void FeatureSet::contributeAttemptEnvironment(const Attempt& attempt, Environment& env) {
  for (auto& feature : features_) feature->contributeAttemptEnvironment(attempt, env);
}

void FeatureSet::workerEvent(const WorkerEvent& event) {
  for (auto& feature : features_) feature->workerEvent(event);
}

void FeatureSet::roundAssigned(const rendezvous::protocol::Assignment& assigned) {
  for (auto& feature : features_) feature->roundAssigned(assigned);
}

void FeatureSet::tell(const FeatureFact& fact) {
  for (auto& feature : features_) feature->heard(fact);
}

void FeatureSet::attach(NodeLifecycle& lifecycle, ImportsLearner* learner) {
  lifecycle_ = &lifecycle;
  learner_ = learner;
  for (auto& feature : features_) lifecycle.addHook(*feature);
}

std::string FeatureSet::describeFailure(const GroupOutcome& outcome,
                                        const FailureContext& context) const {
  return failureReport_->describe(outcome, context);
}

void FeatureSet::noteProgress() {
  if (lifecycle_ != nullptr) lifecycle_->noteProgress();
}

void FeatureSet::markUnhealthy() {
  if (lifecycle_ != nullptr) lifecycle_->markUnhealthy();
}

void FeatureSet::fail(const std::string& report, int exitCode) {
  if (lifecycle_ != nullptr) lifecycle_->fail(report, exitCode);
}

void FeatureSet::learnProgramImports() {
  if (learner_ != nullptr) learner_->learnProgramImports();
}

}  // namespace ddprun::agent
