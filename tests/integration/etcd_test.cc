// --rdzv_backend=etcd against a real 3-member etcd cluster on loopback:
// static and elastic jobs, a node killed with SIGKILL, an etcd member
// killed mid-job, etcd unreachable, and PyTorch workers over it.
#include <signal.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "ddprun/rendezvous/etcd_client.h"
#include "etcd_cluster.h"
#include "launcher_support.h"
#include "node_process.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using test_support::EtcdCluster;
using test_support::Node;
using test_support::startNode;

class EtcdRendezvousTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new EtcdCluster(3); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    dir_ = test_support::scratch();
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
  // The keys left under this job's prefix.
  std::size_t keysLeft() {
    rendezvous::EtcdClient client(cluster_->options());
    return client.getPrefix("/ddprun/" + rdzvId_ + "/").kvs.size();
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

TEST_F(EtcdRendezvousTest, SurvivorsReformWhenTheFirstNodeIsKilled) {
  const std::string script = fmt::format(
      "echo started group=$GROUP_RANK world=$WORLD_SIZE; "
      "while [ ! -e {0}/go ]; do sleep 0.05; done; echo finished world=$WORLD_SIZE",
      dir_.string());
  const std::vector<std::string> extra = {
      "--rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=2,last_call_timeout=1"};
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(node(options("2:3", extra), script));
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("started", 2, 30s)) << n.err;
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
    nodes.push_back(node({"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=etcd",
                          "--rdzv_endpoint=" + cluster.endpoints(), "--rdzv_id=" + rdzvId_,
                          "--max_restarts=1", "--rdzv_conf=keep_alive_interval=0.5"},
                         script));
  }
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("Round 1:", 1, 30s, true)) << n.err;
  cluster.kill(0);                      // the member every node talks to first
  std::this_thread::sleep_for(1500ms);  // keep-alives and the watch move on
  std::ofstream(dir_ / "go").put('1');
  for (auto& n : nodes) {
    ASSERT_EQ(n.finish(60s), 0) << n.err;
    EXPECT_NE(n.out.find("restart=1"), std::string::npos) << n.out;
    EXPECT_EQ(n.err.find("lost the rendezvous"), std::string::npos) << n.err;
  }
}

TEST_F(EtcdRendezvousTest, UnreachableEtcdFailsWithAClearMessageAfterTheTimeout) {
  const auto port = test_support::freePort();
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
