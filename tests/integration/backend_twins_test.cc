// The scenarios every rendezvous backend must pass alike, run over each:
// the standalone daemon (--rdzv_backend=c10d) and a real 3-member etcd
// cluster (--rdzv_backend=etcd). One round policy decides for both
// (docs/architecture.md, "One round policy"); these show that the nodes
// see the same job either way.
#include <signal.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "child_process.h"
#include "etcd_cluster.h"
#include "launcher_support.h"
#include "node_process.h"
#include "stop_file.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::Node;

enum class Backend { kDaemon, kEtcd };

std::string nameOf(Backend backend) { return backend == Backend::kEtcd ? "Etcd" : "Daemon"; }
void PrintTo(Backend backend, std::ostream* os) { *os << nameOf(backend); }

class BackendTwins : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kEtcd) {
      etcd_ = std::make_unique<harness::EtcdCluster>(3);
      backend_ = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + etcd_->endpoints()};
      conf_ = "keep_alive_interval=1,keep_alive_max_attempt=3";
      return;
    }
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{harness::kBinDir + "/ddprun-rendezvous", "--host", "127.0.0.1",
                                 "--port", "0"},
        std::map<std::string, std::string>{{"DDPRUN_TOKEN", harness::kToken}});
    const auto line = daemon_->readStdoutLine(10s);  // "... listening on 127.0.0.1:PORT"
    ASSERT_TRUE(line.has_value());
    backend_ = {"--rdzv_backend=c10d",
                "--rdzv_endpoint=127.0.0.1:" + line->substr(line->rfind(':') + 1)};
    conf_ = "is_host=0,close_timeout=10";
    env_ = {{"DDPRUN_TOKEN", harness::kToken}};
  }
  void TearDown() override {
    if (!daemon_) return;
    daemon_->signal(SIGTERM);
    EXPECT_EQ(daemon_->wait(10s), 0);
  }

  // The node on 127.0.0.<index + 1> of the job "job" of `nnodes` nodes,
  // two workers each, with `conf` added to the backend's --rdzv_conf.
  Node node(const std::string& nnodes, int index, const std::string& conf,
            const std::vector<std::string>& extra, const std::string& script) {
    std::vector<std::string> o = {"--nnodes=" + nnodes, "--nproc_per_node=2"};
    o.insert(o.end(), backend_.begin(), backend_.end());
    o.insert(o.end(),
             {"--rdzv_id=job", fmt::format("--local_addr=127.0.0.{}", index + 1),
              "--rdzv_conf=last_call_timeout=1," + conf_ + (conf.empty() ? "" : "," + conf),
              "--log_prefix=", "--monitor_interval=0.1"});
    o.insert(o.end(), extra.begin(), extra.end());
    return harness::startNode(o, script, env_);
  }

 private:
  std::unique_ptr<harness::EtcdCluster> etcd_;
  std::unique_ptr<ChildProcess> daemon_;
  std::vector<std::string> backend_;
  std::string conf_;
  std::map<std::string, std::string> env_;
};

// A host whose workers fail round after round is left out of an elastic job
// (rdzv_conf max_node_failures, node_cooldown): three agents on
// 127.0.0.2-4 (2:3 nodes), the one on .4 always fails. It is excluded after
// two failures in a row and exits with its workers' code; the others log
// the exclusion and its end, re-form without it and finish within the
// restart budget.
TEST_P(BackendTwins, AHostThatKeepsFailingIsExcludedAndTheOthersFinish) {
  const harness::StopFile stop;
  std::vector<Node> nodes;
  for (int i = 1; i <= 3; ++i) {
    nodes.push_back(node(
        "2:3", i, "max_node_failures=2,node_cooldown=2", {"--max_restarts=3"},
        i == 3 ? "echo bad disk >&2; exit 7" : stop.script("world $WORLD_SIZE") + "; echo done"));
  }
  // The good nodes train until both saw the cooldown end.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes[i].waitFor("the cooldown of 127.0.0.4", 1, 60s, true)) << nodes[i].err;
  }
  stop.create();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(nodes[i].finish(60s), 0) << nodes[i].err;
    EXPECT_NE(nodes[i].out.find("done"), std::string::npos) << nodes[i].out;
    EXPECT_NE(nodes[i].out.find("world 4"), std::string::npos) << nodes[i].out;
    EXPECT_NE(nodes[i].err.find("at 127.0.0.4 is excluded from rendezvous 'job' for 2 s: its "
                                "workers failed first in 2 rounds in a row"),
              std::string::npos)
        << nodes[i].err;
    EXPECT_NE(nodes[i].err.find("the cooldown of 127.0.0.4 in rendezvous 'job' ended"),
              std::string::npos)
        << nodes[i].err;
  }
  EXPECT_EQ(nodes[2].finish(60s), 7) << nodes[2].err;
  EXPECT_NE(nodes[2].err.find("this node is left out of the job"), std::string::npos)
      << nodes[2].err;
}

// An agent of an elastic job stopped by SIGTERM leaves: the others re-form
// without it at once (it is named as a node that left, not waited for as
// lost) and finish.
TEST_P(BackendTwins, ANodeThatLeavesOnSigtermIsNamedAndTheOthersGoOn) {
  const harness::StopFile stop;
  std::vector<Node> nodes;
  for (int i = 1; i <= 3; ++i) {
    nodes.push_back(node("2:3", i, "", {},
                         stop.script("started group=$GROUP_RANK world=$WORLD_SIZE") +
                             "; echo finished world=$WORLD_SIZE"));
  }
  for (auto& n : nodes) ASSERT_TRUE(n.waitFor("started", 2, 30s)) << n.err;
  nodes[2].process->signal(SIGTERM);
  ASSERT_EQ(nodes[2].finish(), 128 + SIGTERM) << nodes[2].err;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes[i].waitFor("started group=", 4, 30s)) << nodes[i].err;
  }
  stop.create();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(nodes[i].finish(), 0) << nodes[i].err;
    EXPECT_NE(nodes[i].out.find("finished world=4"), std::string::npos) << nodes[i].out;
    EXPECT_NE(nodes[i].err.find("lost (it left the job (its ddprun exits with code 143, SIGTERM))"),
              std::string::npos)
        << nodes[i].err;
  }
}

INSTANTIATE_TEST_SUITE_P(, BackendTwins, ::testing::Values(Backend::kDaemon, Backend::kEtcd),
                         [](const ::testing::TestParamInfo<Backend>& param) {
                           return nameOf(param.param);
                         });

}  // namespace
}  // namespace ddprun
