// Feature: the contract between the agent's core and each capability built
// on it (a watchdog, the event log, node metrics, ...; docs/architecture.md,
// "Adding a feature"). A feature
// - sees the lifecycle's steps (LifecycleHook), each worker's start and end,
//   and each round this node is given;
// - adds to the workers' environment: once for the node, before the zygote
//   or any worker starts, and again for each attempt;
// - acts only through FeaturePorts: the lifecycle's inputs (progress, an
//   unhealthy node, a failure), the running workers (who runs, why one is
//   about to die, killing one), and facts it tells the other features,
//   which hear them without including each other.
// Each feature is built from its slice of the configuration by one factory
// and registered in one list (features/registry.cc); the list's order is
// the order in which the features see each step.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <map>
#include <string>
#include <variant>

#include "ddprun/agent/core/node_lifecycle.h"
#include "ddprun/agent/core/running_workers.h"
#include "ddprun/agent/core/worker_event.h"

namespace ddprun::agent {

using Environment = std::map<std::string, std::string>;

// --- facts one feature tells the others ------------------------------------
// The watchdog found a hung worker (and kills it): the downtime's detection
// phase counts from when it stopped.
struct HangFound {
  double stalledSeconds = 0;
};
// A worker armed a file timer: it is training (a first step).
struct TimerRequested {
  int pid = 0;
};
// The node's downtime counters changed (telemetry::DowntimeCounters text):
// what the job's store and a node's own /metrics serve.
struct CountersChanged {
  std::string text;
};
// The node's relay lost the workers' store (why): their failures name it.
struct RelayLost {
  std::string why;
};
using FeatureFact = std::variant<HangFound, TimerRequested, CountersChanged, RelayLost>;

// --- ports -----------------------------------------------------------------
// What a feature may tell the lifecycle (NodeLifecycle implements it).
class LifecycleInputs {
 public:
  virtual ~LifecycleInputs() = default;
  // A worker made progress: a later failure is not a crash loop.
  virtual void noteProgress() = 0;
  // The node cannot run workers any more (a worker stuck in D state): the
  // next failure ends it.
  virtual void markUnhealthy() = 0;
  // The node fails now with `report` and `exitCode`.
  virtual void fail(const std::string& report, int exitCode) = 0;
};

// Where a feature tells a fact; every registered feature hears it.
class FactSink {
 public:
  virtual ~FactSink() = default;
  virtual void tell(const FeatureFact& fact) = 0;
};

// Where the node's events go (the event log: --event_log, events.jsonl).
class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  virtual void record(const std::string& name, const std::string& source,
                      std::map<std::string, std::string> metadata) = 0;
};

// The node's downtime counters now (telemetry::DowntimeCounters text).
class NodeCountersSource {
 public:
  virtual ~NodeCountersSource() = default;
  virtual std::string countersText() const = 0;
};

// Where the job's store keeps this node's counters (its /metrics and
// `ddprun status`); the rounds' room implements it.
class NodeCountersSink {
 public:
  virtual ~NodeCountersSink() = default;
  virtual void publishCounters(std::string text) = 0;
};

// --preload's zygote: learns the modules the training program imports.
class ImportsLearner {
 public:
  virtual ~ImportsLearner() = default;
  virtual void learnProgramImports() = 0;
};

// What one attempt's workers add to the node's environment (the features'
// contributions; the workers' room asks before each attempt).
class AttemptEnvironment {
 public:
  virtual ~AttemptEnvironment() = default;
  virtual void contributeAttemptEnvironment(const Attempt& attempt, Environment& env) = 0;
};

struct FeaturePorts {
  LifecycleInputs& lifecycle;
  RunningWorkers& workers;
  FactSink& facts;
};

class Feature : public LifecycleHook {
 public:
  // Adds to what every worker (and the zygote) inherits; called once, in
  // registration order, before any of them starts.
  virtual void contributeEnvironment(Environment& /*env*/) {}
  // Adds to one attempt's workers' environment, over the node's; a value
  // the node's environment already holds is the user's and is kept.
  virtual void contributeAttemptEnvironment(const Attempt& /*attempt*/, Environment& /*env*/) {}
  virtual void workerEvent(const WorkerEvent& /*event*/) {}
  // This node was given a round (before its workers start).
  virtual void roundAssigned(const rendezvous::protocol::Assignment& /*assigned*/) {}
  virtual void heard(const FeatureFact& /*fact*/) {}
};

}  // namespace ddprun::agent
