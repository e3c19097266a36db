// --rdzv_backend=etcd against a real 3-member etcd cluster on loopback:
// static and elastic jobs, a node killed with SIGKILL, the coordinator
// killed or paused and its successor, a killed job's keys
// expiring, 512 simulated nodes' requests and watch events, an etcd member
// killed mid-job, etcd unreachable, and PyTorch workers over it.
#include <signal.h>
#include <sys/resource.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/etcd_client.h"
#include "ddprun/rendezvous/etcd_rendezvous.h"
#include "etcd_cluster.h"
#include "etcd_coordinator.h"
#include "etcd_round.h"
#include "launcher_support.h"
#include "node_process.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::EtcdCluster;
using harness::Node;
using harness::startNode;

// The members of `cluster` that process `pid` has TCP connections to (its
// sockets' inodes matched in /proc/<pid>/net/tcp), each as often as it has.
std::vector<int> membersUsedBy(pid_t pid, const EtcdCluster& cluster) {
  std::set<std::string> inodes;
  const std::string fds = fmt::format("/proc/{}/fd", pid);
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(fds, ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::map<int, int> memberOfPort;
  for (int i = 0; i < 3; ++i) {
    const std::string endpoint = cluster.endpoint(i);
    memberOfPort[std::stoi(endpoint.substr(endpoint.rfind(':') + 1))] = i;
  }
  std::vector<int> used;
  std::ifstream tcp(fmt::format("/proc/{}/net/tcp", pid));
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (state != "01" || !inodes.contains(inode)) continue;  // 01: established
    const int port = std::stoi(remote.substr(remote.find(':') + 1), nullptr, 16);
    if (auto member = memberOfPort.find(port); member != memberOfPort.end()) {
      used.push_back(member->second);
    }
  }
  return used;
}

class EtcdRendezvousTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new EtcdCluster(3); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    dir_ = harness::scratch();
    rdzvId_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // Options of one node of the job.
  std::vector<std::string> options(const std::string& nnodes, std::vector<std::string> extra = {}) {
    std::vector<std::string> o = {
        "--nnodes=" + nnodes,   "--nproc_per_node=2",
        "--rdzv_backend=etcd",  "--rdzv_endpoint=" + cluster_->endpoints(),
        "--rdzv_id=" + rdzvId_, "--monitor_interval=0.1"};
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  }
  // Waits for every node to exit with `code`; on a mismatch shows every
  // node's log (the cause is often on another node).
  static void expectAllExit(std::vector<Node>& nodes, int code, std::chrono::seconds limit = 60s) {
    bool ok = true;
    for (auto& n : nodes) ok = n.finish(limit) == std::optional<int>(code) && ok;
    if (ok) return;
    for (auto& n : nodes) ADD_FAILURE() << "node log:\n" << n.err;
  }
  static Node node(std::vector<std::string> o, const std::string& script) {
    return startNode(std::move(o), script, {});
  }
  // The keys left under this job's prefix (or one folder of it).
  std::size_t keysLeft(const std::string& folder = "") {
    rendezvous::EtcdClient client(cluster_->options());
    return client.getPrefix("/ddprun/" + rdzvId_ + "/" + folder).kvs.size();
  }
  // The job's state key: its value and mod revision (0: absent).
  std::pair<std::string, std::int64_t> stateKey() {
    rendezvous::EtcdClient client(cluster_->options());
    const auto range = client.get("/ddprun/" + rdzvId_ + "/state");
    if (range.kvs.empty()) return {"", 0};
    return {range.kvs.front().value, range.kvs.front().modRevision};
  }
  // Waits, watching the folder in etcd, until it holds `count` keys
  // (bounded: the watch is cancelled after `limit`).
  bool waitForKeys(const std::string& folder, std::size_t count, std::chrono::seconds limit = 30s) {
    const std::string prefix = "/ddprun/" + rdzvId_ + "/" + folder;
    rendezvous::EtcdClient client(cluster_->options());
    const auto range = client.getPrefix(prefix);
    if (range.kvs.size() == count) return true;
    rendezvous::EtcdWatch watch(cluster_->options(), prefix, range.revision + 1);
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::thread timer([&] {
      std::unique_lock lock(mutex);
      if (!finished.wait_for(lock, limit, [&] { return done; })) watch.cancel();
    });
    bool reached = false;
    try {
      while (!reached) {
        watch.next();
        reached = client.getPrefix(prefix).kvs.size() == count;
      }
    } catch (const Error&) {
      // Cancelled at the limit.
    }
    {
      std::lock_guard lock(mutex);
      done = true;
    }
    finished.notify_all();
    timer.join();
    return reached;
  }
  // Three nodes of a 2:3 job with 3 s leases, whose workers print
  // "started group=G world=W", wait for dir_/go and print "finished
  // world=W"; returns once every node's workers have started.
  std::vector<Node> startThreeWaitingNodes() {
    const std::string script = fmt::format(
        "echo started group=$GROUP_RANK world=$WORLD_SIZE; "
        "while [ ! -e {0}/go ]; do sleep 0.05; done; echo finished world=$WORLD_SIZE",
        dir_.string());
    const std::vector<std::string> extra = {
        "--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1"};
    std::vector<Node> nodes;
    for (int i = 0; i < 3; ++i) nodes.push_back(node(options("2:3", extra), script));
    for (auto& n : nodes) EXPECT_TRUE(n.waitFor("started", 2, 30s)) << n.err;
    return nodes;
  }
  static int coordinatorOf(std::vector<Node>& nodes) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].waitFor("coordinates rendezvous", 1, 0s, true);
      if (nodes[i].err.find("coordinates rendezvous") != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // What srun gives the task of node `nodeId` of an `nnodes`-node job step
  // (all on this host), and the error file of its ddprun.
  static std::map<std::string, std::string> slurmStep(int nodeId, int nnodes,
                                                      const std::filesystem::path& errorFile) {
    std::string nodelist = "localhost";
    for (int i = 1; i < nnodes; ++i) nodelist += ",localhost";
    return {{"SLURM_JOB_ID", "4242"},
            {"SLURM_STEP_ID", "0"},
            {"SLURM_STEP_NUM_NODES", std::to_string(nnodes)},
            {"SLURM_STEP_NODELIST", nodelist},
            {"SLURM_NODEID", std::to_string(nodeId)},
            {"TORCHELASTIC_ERROR_FILE", errorFile.string()}};
  }
  // A 3-node job inside a Slurm job step (its variables in each node's
  // environment; node rank = SLURM_NODEID) with 3 s leases, whose workers
  // wait: one node's ddprun (the coordinator's, or another's) is sent
  // `signal`; once its lease expires (SIGKILL) or it has left (SIGTERM: it
  // says so with its exit code) the two others end the job at once, exit 1
  // and name it, its address, node rank and why in their output and error
  // files (TORCHELASTIC_ERROR_FILE).
  void loseANodeOfASlurmStep(bool killCoordinator, int signal = SIGKILL) {
    const std::vector<std::string> o =
        options("3", {"--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=3"});
    const auto errorFile = [&](int rank) { return dir_ / fmt::format("error-{}.json", rank); };
    std::vector<Node> nodes;
    for (int rank = 0; rank < 3; ++rank) {
      nodes.push_back(startNode(o, "echo started rank=$RANK; exec sleep 600",
                                slurmStep(rank, 3, errorFile(rank))));
    }
    for (auto& n : nodes) ASSERT_TRUE(n.waitFor("started rank=", 2, 60s)) << n.err;
    const int coordinator = coordinatorOf(nodes);
    ASSERT_GE(coordinator, 0);
    const int lost = killCoordinator ? coordinator : (coordinator + 1) % 3;
    const auto killed = std::chrono::steady_clock::now();
    nodes[lost].process->signal(signal);
    ASSERT_EQ(nodes[lost].finish(), 128 + signal);
    const std::string named = fmt::format(
        ", node rank {}, lost ({})", lost,
        signal == SIGKILL ? "stopped renewing its etcd lease"
                          : "it left the job (its ddprun exits with code 143, SIGTERM)");
    for (int rank = 0; rank < 3; ++rank) {
      if (rank == lost) continue;
      // Bounded at 120 s, a fifth of the join timeout the job waited for.
      ASSERT_EQ(nodes[rank].finish(120s), 1) << nodes[rank].err;
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - killed;
      std::cout << fmt::format("[ measured ] node rank {} exited {:.1f} s after the signal\n", rank,
                               took.count());
      for (const std::string& text : {nodes[rank].err, harness::readText(errorFile(rank))}) {
        EXPECT_NE(text.find("the job lost a node: node "), std::string::npos) << text;
        EXPECT_NE(text.find(named), std::string::npos) << text;
        EXPECT_NE(text.find("Its nodes are a fixed set (a Slurm job step's 3), so a lost node "
                            "never returns, and 2 of them are left, fewer than the minimum of 3"),
                  std::string::npos)
            << text;
      }
    }
  }

  static EtcdCluster* cluster_;
  std::filesystem::path dir_;
  std::string rdzvId_;
};

EtcdCluster* EtcdRendezvousTest::cluster_ = nullptr;

TEST_F(EtcdRendezvousTest, StaticJobGetsTheRanksItAskedFor) {
  const std::string script = "echo rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK";
  std::vector<Node> nodes;
  for (int rank : {1, 0}) {
    nodes.push_back(node(options("2", {"--node_rank=" + std::to_string(rank)}), script));
  }
  expectAllExit(nodes, 0);
  for (const char* line : {"rank=2 world=4 group=1", "rank=3 world=4 group=1"}) {
    EXPECT_NE(nodes[0].out.find(line), std::string::npos) << nodes[0].out;
  }
  for (const char* line : {"rank=0 world=4 group=0", "rank=1 world=4 group=0"}) {
    EXPECT_NE(nodes[1].out.find(line), std::string::npos) << nodes[1].out;
  }
  EXPECT_EQ(keysLeft(), 0u) << "the last node out removes the rendezvous";
}

TEST_F(EtcdRendezvousTest, ElasticJobRestartsAfterAFailureOnTheBudget) {
  // Round 1: rank 3 fails, the others wait (as ranks blocked in a
  // collective would) until the round's end stops them.
  const std::string script =
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then exit 3; fi; sleep 60; "
      "fi; echo done rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT";
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(
        node(options("2:3", {"--max_restarts=2", "--rdzv_conf=last_call_timeout=1"}), script));
  }
  expectAllExit(nodes, 0);
  std::string all;
  for (auto& n : nodes) all += n.out;
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(all.find(fmt::format("done rank={} world=6 restart=1", rank)), std::string::npos)
        << all;
  }
  EXPECT_EQ(keysLeft(), 0u);
}

// --event_log_handler=file:PATH on a multi-node job: one JSON object per
// line for each rendezvous, worker start, failure, restart and the exit.
TEST_F(EtcdRendezvousTest, TheEventLogRecordsTheJobsLife) {
  const std::string script =
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then exit 3; fi; sleep 60; "
      "fi; true";
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    const auto log = dir_ / fmt::format("events{}.jsonl", i);
    nodes.push_back(node(
        options("2", {"--max_restarts=1", "--event_log_handler=file:" + log.string()}), script));
  }
  expectAllExit(nodes, 0);
  std::map<std::string, int> names;
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(dir_ / fmt::format("events{}.jsonl", i));
    for (std::string line; std::getline(in, line);) {
      const auto event = nlohmann::json::parse(line);  // every line is one JSON object
      ++names[event["name"].get<std::string>()];
      EXPECT_TRUE(event["timestamp"].is_number()) << line;
      if (event["source"] == "WORKER") {
        EXPECT_EQ(event["metadata"]["rdzv_backend"], "etcd");
      }
    }
  }
  EXPECT_EQ(names["torchelastic.agent.RENDEZVOUS"], 4);  // two rounds, two nodes
  EXPECT_EQ(names["torchelastic.worker.status.START"], 8);
  EXPECT_EQ(names["torchelastic.worker.status.FAILED"], 1);
  EXPECT_EQ(names["torchelastic.agent.RESTART"], 2);  // each node restarts once
  EXPECT_EQ(names["torchelastic.agent.status.SUCCEEDED"], 2);
}

TEST_F(EtcdRendezvousTest, SurvivorsReformWhenTheFirstNodeIsKilled) {
  std::vector<Node> nodes = startThreeWaitingNodes();
  if (HasFailure()) return;
  // The node that got group rank 0 joined first (arrival order): it is the
  // one whose address and port every worker uses as MASTER.
  int first = -1;
  for (int i = 0; i < 3; ++i) {
    if (nodes[i].out.find("started group=0") != std::string::npos) first = i;
  }
  ASSERT_GE(first, 0);
  nodes[first].process->signal(SIGKILL);
  ASSERT_EQ(nodes[first].finish(), 128 + SIGKILL);
  for (int i = 0; i < 3; ++i) {
    if (i == first) continue;
    ASSERT_TRUE(nodes[i].waitFor("started group=", 4, 30s)) << nodes[i].err;
  }
  std::ofstream(dir_ / "go").put('1');
  for (int i = 0; i < 3; ++i) {
    if (i == first) continue;
    ASSERT_EQ(nodes[i].finish(), 0) << nodes[i].err;
    EXPECT_NE(nodes[i].out.find("finished world=4"), std::string::npos) << nodes[i].out;
    EXPECT_NE(nodes[i].err.find("Round 2"), std::string::npos) << nodes[i].err;
    EXPECT_NE(nodes[i].err.find("stopped renewing its etcd lease"), std::string::npos)
        << nodes[i].err;
  }
}

TEST_F(EtcdRendezvousTest, ACoordinatorKilledWhileARoundFormsHandsItToItsSuccessor) {
  // A 4-node job: the first node (the coordinator) and two others wait;
  // the coordinator is SIGKILLed before the round can complete; the next
  // oldest node takes over and forms the round with two that come later.
  const std::vector<std::string> extra = {
      "--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=3"};
  const std::string script = "echo world=$WORLD_SIZE group=$GROUP_RANK";
  std::vector<Node> nodes;
  nodes.push_back(node(options("4", extra), script));
  ASSERT_TRUE(nodes[0].waitFor("coordinates rendezvous", 1, 30s, true)) << nodes[0].err;
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("4", extra), script));
  ASSERT_TRUE(waitForKeys("joining/", 3)) << "three nodes wait";
  nodes[0].process->signal(SIGKILL);
  ASSERT_EQ(nodes[0].finish(), 128 + SIGKILL);
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("4", extra), script));
  for (int i = 1; i < 5; ++i) {
    ASSERT_EQ(nodes[i].finish(60s), 0) << nodes[i].err;
    EXPECT_NE(nodes[i].out.find("world=8"), std::string::npos) << nodes[i].out;
  }
  // The oldest node left took over before the round formed; the others
  // coordinated nothing before it (only, perhaps, as the job's nodes left).
  const auto coordinatedBeforeTheRound = [](const Node& n) {
    const auto coordinated = n.err.find("coordinates rendezvous");
    return coordinated != std::string::npos && coordinated < n.err.find("Round 1:");
  };
  // Nodes 1 and 2 started together: the older of them is the successor.
  EXPECT_NE(coordinatedBeforeTheRound(nodes[1]), coordinatedBeforeTheRound(nodes[2]))
      << nodes[1].err << nodes[2].err;
  for (int i = 3; i < 5; ++i) EXPECT_FALSE(coordinatedBeforeTheRound(nodes[i])) << nodes[i].err;
  EXPECT_EQ(keysLeft(), 0u);
}

TEST_F(EtcdRendezvousTest, APausedCoordinatorResumedAfterItsLeaseExpiredWritesNothing) {
  std::vector<Node> nodes = startThreeWaitingNodes();
  if (HasFailure()) return;
  const int paused = coordinatorOf(nodes);
  ASSERT_GE(paused, 0);
  nodes[paused].process->signal(SIGSTOP);
  // Its lease expires; its successor ends round 1 and forms round 2.
  for (int i = 0; i < 3; ++i) {
    if (i == paused) continue;
    ASSERT_TRUE(nodes[i].waitFor("started", 4, 30s)) << nodes[i].err;
  }
  const auto before = stateKey();
  nodes[paused].process->signal(SIGCONT);
  // It finds its lease gone and stops; nothing it does changes the state.
  const auto code = nodes[paused].finish(30s);
  ASSERT_TRUE(code.has_value()) << nodes[paused].err;
  EXPECT_EQ(*code, 1) << nodes[paused].err;
  EXPECT_NE(nodes[paused].err.find("lease expired"), std::string::npos) << nodes[paused].err;
  EXPECT_EQ(stateKey(), before);
  std::ofstream(dir_ / "go").put('1');
  for (int i = 0; i < 3; ++i) {
    if (i == paused) continue;
    ASSERT_EQ(nodes[i].finish(), 0) << nodes[i].err;
    EXPECT_NE(nodes[i].out.find("finished world=4"), std::string::npos) << nodes[i].out;
  }
}

// The guard itself: a coordinator whose alive key is gone (a node paused
// past its lease) tries to create a rendezvous, writes nothing and stops.
TEST_F(EtcdRendezvousTest, ACoordinatorWithoutItsAliveKeyWritesNothing) {
  rendezvous::EtcdClient client(cluster_->options());
  const std::string base = "/ddprun/" + rdzvId_ + "/";
  const std::int64_t lease = client.grantLease(std::chrono::seconds(5));
  std::optional<rendezvous::EtcdKeyValue> previous;
  const std::int64_t revision = client.put(base + "alive/old", "", lease, &previous);
  client.revokeLease(lease);  // the lease expired while the node was paused
  rendezvous::etcd::EtcdCoordinator coordinator(
      {cluster_->options(), rdzvId_, "old", base, revision, std::chrono::seconds(10), nullptr},
      client);
  rendezvous::protocol::JoinRequest request;
  request.minNodes = request.maxNodes = 1;
  coordinator.offer(request);
  std::thread run([&] { coordinator.run(); });  // returns once the guard fails
  run.join();
  EXPECT_EQ(keysLeft(), 0u) << "nothing was written";
}

// Three agents on 127.0.0.2-4 (2:3 nodes); the one on .4 always fails. It
// is excluded after two failures in a row and exits; the others log the
// exclusion and its end, re-form without it and finish within the budget.
// Every node of a job SIGKILLed: its keys stay (ddprun status says for how
// long), expire after job_ttl, and the id then starts afresh: no restart
// of the killed job is counted against the new one.
TEST_F(EtcdRendezvousTest, AKilledJobsKeysExpireAndItsIdStartsAfresh) {
  const std::vector<std::string> extra = {
      "--max_restarts=3", "--rdzv_conf=job_ttl=4,keep_alive_interval=1,keep_alive_max_attempt=3"};
  const std::string script =
      "echo restarts=$TORCHELASTIC_RESTART_COUNT; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 3 ]; then exit 3; fi; sleep 60";
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("2", extra), script));
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("restarts=1", 2, 30s)) << n.err;
  for (auto& n : nodes) n.process->signal(SIGKILL);
  for (auto& n : nodes) n.finish();
  const auto status =
      harness::runDdprun({"status", "--rdzv_backend=etcd",
                          "--rdzv_endpoint=" + cluster_->endpoints(), "--rdzv_id=" + rdzvId_});
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("restarts: 1 of 3 used"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("with none, they expire in"), std::string::npos) << status.out;
  ASSERT_TRUE(waitForKeys("", 0)) << "the job's keys expire";
  nodes.clear();
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(node(
        options("2", extra),
        fmt::format("echo started; while [ ! -e {}/go ]; do sleep 0.05; done", dir_.string())));
  }
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("started", 2, 30s)) << n.err;
  const auto fresh =
      harness::runDdprun({"status", "--rdzv_backend=etcd",
                          "--rdzv_endpoint=" + cluster_->endpoints(), "--rdzv_id=" + rdzvId_});
  EXPECT_NE(fresh.out.find("round 1 running"), std::string::npos) << fresh.out;
  EXPECT_NE(fresh.out.find("restarts: 0 of 3 used"), std::string::npos) << fresh.out;
  std::ofstream(dir_ / "go").put('1');
  expectAllExit(nodes, 0);
}

// 512 nodes (each a real EtcdRendezvous, as the benchmark's) form one
// round; each node but the coordinator sees O(1) watch events and makes
// O(1) requests, whatever N.
TEST_F(EtcdRendezvousTest, FiveHundredTwelveNodesFormARoundWithConstantWorkPerNode) {
  constexpr int kNodes = 512;
  rlimit limit{};  // three connections a node
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  std::vector<std::unique_ptr<rendezvous::EtcdRendezvous>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    rendezvous::EtcdRendezvousOptions o;
    o.etcd = cluster_->options();
    o.etcd.requestTimeout = 30s;
    o.rdzvId = rdzvId_;
    o.nodeId = fmt::format("node{}", i);
    o.leaseTtl = 60s;
    o.connectTimeout = 120s;
    nodes.push_back(std::make_unique<rendezvous::EtcdRendezvous>(o));
  }
  std::vector<std::optional<rendezvous::protocol::Assignment>> got(kNodes);
  std::vector<std::string> errors(kNodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      rendezvous::protocol::JoinRequest request;
      request.rdzvId = rdzvId_;
      request.nodeId = fmt::format("node{}", i);
      request.localWorldSize = 8;
      request.minNodes = request.maxNodes = kNodes;
      request.address = "127.0.0.1";
      try {
        got[static_cast<std::size_t>(i)] = nodes[static_cast<std::size_t>(i)]->join(request, 300s);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::uint32_t> groupRanks;
  int coordinators = 0;
  std::uint64_t maxEvents = 0, maxRequests = 0;
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(got[static_cast<std::size_t>(i)]) << errors[static_cast<std::size_t>(i)];
    const auto& a = *got[static_cast<std::size_t>(i)];
    EXPECT_EQ(a.worldSize, 8u * kNodes);
    EXPECT_EQ(a.rankOffset, 8 * a.groupRank);
    groupRanks.insert(a.groupRank);
    const auto stats = nodes[static_cast<std::size_t>(i)]->stats();
    if (stats.coordinator) {
      ++coordinators;
      continue;
    }
    maxEvents = std::max(maxEvents, stats.watchEvents);
    maxRequests = std::max(maxRequests, stats.requests);
  }
  EXPECT_EQ(groupRanks.size(), static_cast<std::size_t>(kNodes));
  EXPECT_EQ(coordinators, 1);
  // The state's creation and the round's start (a node that arrived after
  // the state was created sees one); its predecessor's watch sees nothing.
  EXPECT_LE(maxEvents, 3u);
  // Lease, alive key, state, predecessor, joining, assign key (and a retry
  // or two on a busy machine).
  EXPECT_LE(maxRequests, 12u);
  for (auto& n : nodes) n->shutdown();
}

TEST_F(EtcdRendezvousTest, ClientsSpreadOverTheMembers) {
  // 30 clients, each at a random member: all on one would be a 1 in 10^14
  // chance.
  std::vector<std::unique_ptr<rendezvous::EtcdClient>> clients;
  for (int i = 0; i < 30; ++i) {
    clients.push_back(std::make_unique<rendezvous::EtcdClient>(cluster_->options()));
    clients.back()->get("/ddprun/spread-test");
  }
  const auto used = membersUsedBy(::getpid(), *cluster_);
  EXPECT_GE(std::set<int>(used.begin(), used.end()).size(), 2u);
}

TEST_F(EtcdRendezvousTest, AnEtcdMemberKilledMidJobChangesNothing) {
  // A second cluster: this test kills one of its members.
  EtcdCluster cluster(3);
  const std::string script = fmt::format(
      "while [ ! -e {0}/go ]; do sleep 0.05; done; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 0 ]; then exit 5; fi; sleep 60; "
      "fi; echo done rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT",
      dir_.string());
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(
        node({"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=etcd",
              "--rdzv_endpoint=" + cluster.endpoints(), "--rdzv_id=" + rdzvId_, "--max_restarts=1",
              // A bound (4 s) above an election (500 ms timeout,
              // randomised up to twice that, slower under load): a
              // renewal needs a leader, and the killed member may
              // have been it.
              "--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=4"},
             script));
  }
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("Round 1:", 1, 30s, true)) << n.err;
  // The member the first node talks to (each node starts at a random one).
  const auto used = membersUsedBy(nodes[0].process->pid(), cluster);
  ASSERT_FALSE(used.empty()) << "node 0 has no connection to etcd";
  const int killed = used.front();
  cluster.kill(killed);
  // The job goes on only once the two members left have a leader (a
  // renewal needs one).
  cluster.waitUntilWritable(30s);
  std::ofstream(dir_ / "go").put('1');
  for (auto& n : nodes) {
    ASSERT_EQ(n.finish(60s), 0) << n.err;
    EXPECT_NE(n.out.find("restart=1"), std::string::npos) << n.out;
    EXPECT_EQ(n.err.find("lost the rendezvous"), std::string::npos) << n.err;
  }
}

// etcd with TLS and client-certificate authentication: the rdzv_conf keys
// of torchrun's etcd backends reach it; without the client certificate
// etcd refuses the node, which says so.
TEST_F(EtcdRendezvousTest, TlsWithClientCertificates) {
  const auto tls = harness::EtcdTls::make(dir_ / "tls");
  EtcdCluster secure(1, tls);
  const std::string endpoint = "--rdzv_endpoint=https://" + secure.endpoint(0);
  const std::string conf = fmt::format("--rdzv_conf=cacert={},cert={},key={}", tls.ca(),
                                       tls.clientCert(), tls.clientKey());
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(
        node({"--nnodes=2", "--rdzv_backend=etcd", endpoint, "--rdzv_id=" + rdzvId_, conf},
             "echo rank=$RANK"));
  }
  expectAllExit(nodes, 0);
  Node refused = node({"--nnodes=2", "--rdzv_backend=etcd", endpoint, "--rdzv_id=other",
                       "--rdzv_conf=join_timeout=2,ca_cert=" + tls.ca()},
                      "true");
  EXPECT_EQ(refused.finish(), 1);
  EXPECT_NE(refused.err.find("could not be reached within 2 s"), std::string::npos) << refused.err;
}

TEST_F(EtcdRendezvousTest, UnreachableEtcdFailsWithAClearMessageAfterTheTimeout) {
  const auto port = harness::freePort();
  Node n =
      node({"--nnodes=2", "--rdzv_backend=etcd", fmt::format("--rdzv_endpoint=127.0.0.1:{}", port),
            "--rdzv_id=x", "--rdzv_conf=join_timeout=2"},
           "true");
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(n.finish(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
  EXPECT_NE(n.err.find(fmt::format("etcd at 127.0.0.1:{} could not be reached within 2 s", port)),
            std::string::npos)
      << n.err;
  EXPECT_NE(n.err.find("check --rdzv_endpoint"), std::string::npos) << n.err;
}

TEST_F(EtcdRendezvousTest, AFailedJobEndsEveryNodeAndItsIdCanBeUsedAgain) {
  const std::string failing = "if [ $RANK = 2 ]; then exit 7; fi; sleep 30";
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("2"), failing));
  expectAllExit(nodes, 7);
  // The same id again: a new job, not the failed one's closed rendezvous.
  nodes.clear();
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("2"), "echo ok=$RANK"));
  expectAllExit(nodes, 0);
  EXPECT_EQ(keysLeft(), 0u);
}

// Inside a Slurm job step a node whose ddprun dies never returns: the job
// ends as soon as its lease expires, not at the join timeout (600 s).
TEST_F(EtcdRendezvousTest, InASlurmStepALostNodeEndsTheJobAtOnce) { loseANodeOfASlurmStep(false); }

// The same when the node lost coordinates: its successor finds the loss
// when it takes over.
TEST_F(EtcdRendezvousTest, InASlurmStepANodeStoppedBySigtermIsNamedAndEndsTheJobAtOnce) {
  loseANodeOfASlurmStep(false, SIGTERM);
}

TEST_F(EtcdRendezvousTest, InASlurmStepALostCoordinatorEndsTheJobAtOnce) {
  loseANodeOfASlurmStep(true);
}

// A node of a step that finishes first leaves (its left key, then its
// lease): it is not lost, and the job ends well.
TEST_F(EtcdRendezvousTest, InASlurmStepNodesThatFinishFirstAreNotLost) {
  std::vector<Node> nodes;
  for (int rank = 0; rank < 3; ++rank) {
    nodes.push_back(startNode(options("3"),
                              fmt::format("if [ $GROUP_RANK = 0 ]; then while [ ! -e {}/go ]; do "
                                          "sleep 0.05; done; fi; echo done rank=$RANK",
                                          dir_.string()),
                              slurmStep(rank, 3, dir_ / fmt::format("error-{}.json", rank))));
  }
  // Group ranks 1 and 2 finish and leave while group rank 0 works on.
  for (int rank = 0; rank < 3; ++rank) {
    if (rank == 0) continue;
    ASSERT_EQ(nodes[rank].finish(60s), 0) << nodes[rank].err;
  }
  std::ofstream(dir_ / "go").put('1');
  ASSERT_EQ(nodes[0].finish(60s), 0) << nodes[0].err;
  EXPECT_EQ(nodes[0].err.find(" was lost"), std::string::npos) << nodes[0].err;
  EXPECT_EQ(keysLeft(), 0u);
}

TEST_F(EtcdRendezvousTest, PyTorchWorkersFormAProcessGroupOnGroupRankZerosStore) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string script =
      "exec /usr/bin/python3 -c \"import torch, torch.distributed as d; "
      "d.init_process_group('gloo'); t = torch.ones(1) * d.get_rank(); d.all_reduce(t); "
      "print('sum', int(t.item()), 'of', d.get_world_size()); d.barrier(); "
      "d.destroy_process_group()\"";
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(node(options("2"), script));
  for (auto& n : nodes) {
    ASSERT_EQ(n.finish(120s), 0) << n.err;
    EXPECT_NE(n.out.find("sum 6 of 4"), std::string::npos) << n.out;
  }
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

// `ddprun status` while a job runs its second round, on either backend:
// the members, their node ranks and addresses, the restarts used and the
// last failure agree with what the agents logged.
class StatusCommandTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StatusCommandTest, AgreesWithWhatTheAgentsLog) {
  const std::string backend = GetParam();
  const auto dir = harness::scratch();
  std::unique_ptr<EtcdCluster> etcd;
  std::string endpoint;
  if (backend == "etcd") {
    etcd = std::make_unique<EtcdCluster>(1);
    endpoint = etcd->endpoints();
  } else {
    endpoint = fmt::format("127.0.0.1:{}", harness::freePort());
  }
  const std::string script = fmt::format(
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then exit 3; fi; sleep 60; "
      "fi; while [ ! -e {}/go ]; do sleep 0.05; done",
      dir.string());
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(
        startNode({"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=" + backend,
                   "--rdzv_endpoint=" + endpoint, "--rdzv_id=status-job", "--max_restarts=2"},
                  script, {}));
  }
  std::map<std::string, std::string> rankOfNode;  // node id -> node rank, from the agents' logs
  const std::regex joining("Node (\\S+) is joining");
  const std::regex round2("Round 2: this node is group rank (\\d+) of 2");
  for (auto& n : nodes) {
    ASSERT_TRUE(n.waitFor("Round 2: this node", 1, 30s, true)) << n.err;
    std::smatch id;
    std::smatch rank;
    ASSERT_TRUE(std::regex_search(n.err, id, joining)) << n.err;
    ASSERT_TRUE(std::regex_search(n.err, rank, round2)) << n.err;
    rankOfNode[id[1]] = rank[1];
  }
  const auto r = harness::runDdprun({"status", "--rdzv_endpoint=" + endpoint,
                                     "--rdzv_id=status-job", "--rdzv_backend=" + backend, "--json"},
                                    {}, 30s);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto status = nlohmann::json::parse(r.out);
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["round"], 2);
  EXPECT_EQ(status["restarts"], 1);
  EXPECT_EQ(status["max_restarts"], 2);
  ASSERT_EQ(status["members"].size(), 2u) << r.out;
  for (const auto& m : status["members"]) {
    const std::string id = m["node_id"];
    ASSERT_TRUE(rankOfNode.contains(id)) << r.out;
    EXPECT_EQ(std::to_string(m["node_rank"].get<int>()), rankOfNode[id]);
    EXPECT_EQ(m["address"], "127.0.0.1");
    EXPECT_EQ(m["local_world_size"], 2);
  }
  EXPECT_EQ(status["last_failure"]["exit_code"], 3);
  EXPECT_EQ(status["last_failure"]["round"], 1);
  EXPECT_TRUE(rankOfNode.contains(status["last_failure"]["node_id"].get<std::string>()));
  // The table says the same.
  const auto table = harness::runDdprun({"status", "--rdzv_endpoint=" + endpoint,
                                         "--rdzv_id=status-job", "--rdzv_backend=" + backend},
                                        {}, 30s);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("round 2 running"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("restarts: 1 of 2 used"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("exit code 3"), std::string::npos) << table.out;
  std::ofstream(dir / "go").put('1');
  for (auto& n : nodes) EXPECT_EQ(n.finish(), 0) << n.err;
  // A rendezvous nobody has joined: exit code 1 and a message.
  const auto missing = harness::runDdprun({"status", "--rdzv_endpoint=" + endpoint,
                                           "--rdzv_id=status-job", "--rdzv_backend=" + backend},
                                          {}, 30s);
  EXPECT_EQ(missing.code, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, StatusCommandTest, ::testing::Values("c10d", "etcd"));

}  // namespace
}  // namespace ddprun
