// SLURM support shared by the launcher and the worker library: hostlist
// expansion ("node[01-04,7],gpu-a3" -> node01 ... gpu-a3), reading a job's
// shape from the SLURM_* environment, and a per-job master port that every
// node of a job computes alike without talking to the others.
//
// Nothing here runs `scontrol` or touches the network; everything is a pure
// function of its arguments, so the same input gives the same answer on
// every node.
//
// Thread-safety: free functions and plain value types without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

namespace env {
// --- read from SLURM (inputs; not part of the agent/worker contract) ------
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";
inline constexpr char kSlurmStepNumNodes[] = "SLURM_STEP_NUM_NODES";  // set by srun
inline constexpr char kSlurmNnodes[] = "SLURM_NNODES";
inline constexpr char kSlurmJobNumNodes[] = "SLURM_JOB_NUM_NODES";
inline constexpr char kSlurmStepNodelist[] = "SLURM_STEP_NODELIST";  // set by srun
inline constexpr char kSlurmJobNodelist[] = "SLURM_JOB_NODELIST";
inline constexpr char kSlurmNodelist[] = "SLURM_NODELIST";
inline constexpr char kSlurmNodeId[] = "SLURM_NODEID";
inline constexpr char kSlurmProcId[] = "SLURM_PROCID";
inline constexpr char kSlurmLocalId[] = "SLURM_LOCALID";
inline constexpr char kSlurmNtasks[] = "SLURM_NTASKS";
inline constexpr char kSlurmTasksPerNode[] = "SLURM_TASKS_PER_NODE";
inline constexpr char kSlurmStepId[] = "SLURM_STEP_ID";  // set by srun only
inline constexpr char kSlurmStepIdOld[] = "SLURM_STEPID";
inline constexpr char kSlurmJobCpusPerNode[] = "SLURM_JOB_CPUS_PER_NODE";  // "32(x2),16"
}  // namespace env

// Most hosts one hostlist may expand to. Anything larger is taken as a typo
// (node[0-99999999]) rather than a cluster, and refused before any memory is
// spent on it.
inline constexpr std::size_t kMaxHostlistHosts = 1'000'000;

// Expands a SLURM hostlist into host names, in the order
// `scontrol show hostnames` prints them (duplicates kept, nothing sorted).
//
//   - Entries are separated by ',' or whitespace outside brackets; empty
//     entries are skipped ("a,,b " = a b). Newlines count as whitespace, so
//     the output of `scontrol show hostnames` can be fed back in.
//   - Inside "[...]" ',' separates ranges "lo-hi" or single numbers.
//   - Each range is zero-padded to the number of digits written in its own
//     start: [08-11] -> 08 09 10 11, [8-11] -> 8 9 10 11, [098-101] ->
//     098 099 100 101.
//   - Several bracket groups in one entry expand as a cartesian product, the
//     first group varying slowest: rack[1-2]-n[1-2] -> rack1-n1 rack1-n2
//     rack2-n1 rack2-n2. Text after a bracket is kept (gpu[1-2]-ib).
//
// Throws ConfigError, naming the bad entry, for: an empty list, unbalanced
// or nested brackets, an empty bracket or range, a non-numeric or negative
// bound, a reversed range ([5-3]), whitespace inside brackets, BlueGene
// "x" boxes, and lists expanding to more than kMaxHostlistHosts hosts.
std::vector<std::string> expandHostlist(std::string_view hostlist);

// Expands SLURM_TASKS_PER_NODE ("2(x3),1" -> 2 2 2 1): one count per node,
// in nodelist order. Throws ConfigError on malformed input.
std::vector<int> expandTasksPerNode(std::string_view tasksPerNode);

// The shape of the SLURM job (or job step) this process runs in.
struct SlurmJob {
  std::string jobId;               // SLURM_JOB_ID, verbatim
  int nnodes = 1;                  // nodes in the step (or the job outside srun)
  int nodeRank = 0;                // SLURM_NODEID: this node's index in `hosts`
  int ntasks = 1;                  // SLURM_NTASKS: tasks in the step
  int procId = 0;                  // SLURM_PROCID: this task's global rank
  int localId = 0;                 // SLURM_LOCALID: this task's rank on its node
  std::vector<std::string> hosts;  // the expanded nodelist; hosts[0] is the master
  std::vector<int> tasksPerNode;   // SLURM_TASKS_PER_NODE expanded; empty if unset
  // In a job step (srun: SLURM_STEP_ID); false in the batch script itself,
  // whose SLURM_NODEID is 0 while the other nodes run nothing.
  bool inStep = false;
  // SLURM_JOB_CPUS_PER_NODE expanded: the CPUs the job has on each node;
  // empty if unset.
  std::vector<int> cpusPerNode;

  // Tasks SLURM started on this node (1 in the one-agent-per-node layout),
  // or nullopt when SLURM_TASKS_PER_NODE is unset or does not cover nodeRank.
  std::optional<int> tasksOnThisNode() const {
    if (nodeRank < 0 || static_cast<std::size_t>(nodeRank) >= tasksPerNode.size()) {
      return std::nullopt;
    }
    return tasksPerNode[static_cast<std::size_t>(nodeRank)];
  }

  // The node that hosts the rendezvous store (and MASTER_ADDR): the first
  // host of the nodelist, which every node computes alike. Lightning's
  // SLURMEnvironment.resolve_root_node_address finds the same host with two
  // regular expressions but never the others; the whole list is expanded
  // here so that its length can be checked against the node count.
  const std::string& masterHost() const { return hosts.front(); }
};

// Reads the SLURM job from `vars` (a snapshot of the process environment).
//
// Returns nullopt when SLURM_JOB_ID is unset or empty (so
// `SLURM_JOB_ID= ddprun ...` opts out); any other variable that is set but
// empty counts as unset. Otherwise the step's values come first, because
// srun may run on part of the allocation and SLURM_NODEID counts within the
// step:
//   nodes   SLURM_STEP_NUM_NODES, else SLURM_NNODES, else SLURM_JOB_NUM_NODES
//   hosts   SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else SLURM_NODELIST
//   ranks   SLURM_NODEID, SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS
// A process outside any job step (an salloc shell) has no SLURM_NODEID;
// that is accepted for a one-node job (all ranks 0, one task) and refused
// for a larger one, since such a process cannot know which node it is.
// The batch script itself (not under srun) does see SLURM_NODEID=0, so a
// ddprun started there looks like node 0 of the job; only srun starts the
// other nodes' agents.
//
// Throws ConfigError, naming the variable and what to do, when a present
// value is malformed (not a number, a bad hostlist), when the node count or
// nodelist is missing, or when the values disagree (the node count is not
// the nodelist's length, a rank is out of range).
std::optional<SlurmJob> detectSlurm(const std::map<std::string, std::string>& vars);

// The default master port of a SLURM job, computed alike on every node
// without communication. The rule (examples/slurm/README.md states it too;
// keep them in step):
//
//   port = kSlurmPortBase + (n mod kSlurmPortSpan), i.e. 15000..31999, where
//   n = the job id              for a decimal id          ("123456")
//   n = array id + task id      for an array id "A_T"     ("1234_5" -> 1239)
//   n = FNV-1a-64 of the id     for any other id          ("1234+1", "abc")
//
// The range ends below Linux's default ephemeral range (32768-60999), so
// outgoing connections do not occupy it. Jobs whose ids differ by less than
// kSlurmPortSpan never collide, so two jobs sharing a node collide only when
// their ids happen to be congruent modulo 17000; tasks of one array differ
// by their task id. Lightning (SLURMEnvironment.main_port) uses 15000 + the
// last four characters of SLURM_JOB_ID read as a number: only 10000 ports
// (jobs 10000 apart collide), an array-style id parses by accident
// (int("34_5") == 345) and a non-numeric id raises ValueError. Like
// Lightning, callers should let MASTER_PORT / --master_port override this.
//
// Throws ConfigError for an empty job id.
inline constexpr std::uint16_t kSlurmPortBase = 15000;
inline constexpr std::uint32_t kSlurmPortSpan = 17000;
std::uint16_t slurmMasterPort(std::string_view jobId);

}  // namespace ddprun
