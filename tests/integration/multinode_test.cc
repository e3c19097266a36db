// Several ddprun agents on one machine, each a separate process advertising
// its own loopback address (127.0.0.1, 127.0.0.2, ...), as separate nodes.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "http_metrics.h"
#include "launcher_support.h"
#include "node_process.h"
#include "stop_file.h"
#include "wait_until.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using harness::ChildProcess;
using harness::freePort;
using harness::kBinDir;
using harness::kDdprun;

using harness::kToken;
using harness::Node;
using harness::startNode;
using harness::StopFile;

// The port a ddprun-rendezvous started with --port 0 prints; 0 if none.
std::uint16_t daemonPort(ChildProcess& daemon) {
  const auto line = daemon.readStdoutLine(10s);
  if (!line) return 0;
  return static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
}

// ddprun-rendezvous on 127.0.0.1, on a port it picks (daemonPort() reads it).
ChildProcess startLoopbackDaemon() {
  return ChildProcess({kBinDir + "/ddprun-rendezvous", "--host", "127.0.0.1", "--port", "0"},
                      {{"DDPRUN_TOKEN", kToken}});
}

std::vector<std::string> dynamicOptions(std::uint16_t port, int index, const std::string& nnodes,
                                        const std::string& extraConf = "") {
  return {"--nnodes=" + nnodes,
          "--nproc_per_node=2",
          "--rdzv_backend=c10d",
          fmt::format("--rdzv_endpoint=127.0.0.1:{}", port),
          "--rdzv_id=job",
          fmt::format("--local_addr=127.0.0.{}", index + 1),
          "--rdzv_conf=last_call_timeout=0.3,close_timeout=10" + extraConf,
          "--log_prefix=",
          "--max_restarts=0"};
}

TEST(MultiNode, StaticJobWithUnequalNodes) {
  const std::uint16_t port = freePort();
  std::vector<Node> nodes;
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(startNode(
        {"--nnodes=3", fmt::format("--node_rank={}", r), "--master_addr=127.0.0.1",
         fmt::format("--master_port={}", port), fmt::format("--nproc_per_node={}", r + 1),
         fmt::format("--local_addr=127.0.0.{}", r + 1), "--log_prefix="},
        "echo W $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $LOCAL_WORLD_SIZE "
        "$MASTER_ADDR"));
  }
  std::set<std::string> lines;
  for (auto& node : nodes) {
    ASSERT_EQ(node.finish(), 0) << node.err;
    for (const auto& line : harness::linesWith(node.out, "W ")) lines.insert(line);
  }
  // Global rank = local world sizes of lower node ranks + local rank.
  const std::set<std::string> expected = {"0 0 6 0 3 1 127.0.0.1", "1 0 6 1 3 2 127.0.0.1",
                                          "2 1 6 1 3 2 127.0.0.1", "3 0 6 2 3 3 127.0.0.1",
                                          "4 1 6 2 3 3 127.0.0.1", "5 2 6 2 3 3 127.0.0.1"};
  EXPECT_EQ(lines, expected);
}

TEST(MultiNode, LateJoinerScalesTheJobUp) {
  const std::uint16_t port = freePort();
  const StopFile stop;
  const std::string script = stop.script("world $WORLD_SIZE");
  Node a = startNode(dynamicOptions(port, 0, "2:3"), script);
  Node b = startNode(dynamicOptions(port, 1, "2:3"), script);
  ASSERT_TRUE(a.waitFor("world 4", 2)) << a.err;  // 2 nodes x 2 workers
  ASSERT_TRUE(b.waitFor("world 4", 2)) << b.err;
  Node c = startNode(dynamicOptions(port, 2, "2:3"), script);
  for (Node* node : {&a, &b, &c}) ASSERT_TRUE(node->waitFor("world 6", 2)) << node->err;
  stop.create();
  for (Node* node : {&a, &b, &c}) {
    EXPECT_EQ(node->finish(), 0) << node->err;
    EXPECT_NE(node->out.find("world 6"), std::string::npos) << node->out << node->err;
  }
  EXPECT_NE(a.err.find("asked to join"), std::string::npos) << a.err;
}

TEST(MultiNode, KilledAgentTakesItsWorkersAndTheOthersGoOn) {
  const std::uint16_t port = freePort();
  const StopFile stop;
  const std::string script = stop.script("world $WORLD_SIZE pid $$");
  std::vector<Node> nodes;
  // Node 0 hosts the store (is_host), so killing node 2 leaves it up. The
  // heartbeats would declare a node dead only after 3 minutes: the survivors
  // can learn of the death within the test only from the closed connection.
  for (int i = 0; i < 3; ++i) {
    const std::string conf = std::string(i == 0 ? ",is_host=1" : ",is_host=0") +
                             ",keep_alive_interval=60,keep_alive_max_attempt=3";
    nodes.push_back(startNode(dynamicOptions(port, i, "2:3", conf), script));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 6", 2)) << node.err;
  // The third agent (not the one hosting the store) dies with SIGKILL.
  std::vector<pid_t> orphans;
  std::smatch m;
  std::string text = nodes[2].out;
  while (std::regex_search(text, m, std::regex(R"(pid (\d+))"))) {
    orphans.push_back(std::stoi(m[1]));
    text = m.suffix();
  }
  nodes[2].process->signal(SIGKILL);
  ASSERT_EQ(nodes[2].finish(), 128 + SIGKILL);
  // The survivors restart into a round of 2 nodes without spending restarts.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(nodes[i].waitFor("world 4", 2, 60s)) << nodes[i].err;
  for (pid_t pid : orphans)
    EXPECT_TRUE(harness::processGone(pid)) << "worker " << pid << " survived";
  stop.create();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(nodes[i].finish(), 0) << nodes[i].err;
}

TEST(MultiNode, StoppedAgentMissesHeartbeatsAndIsRemoved) {
  const std::uint16_t port = freePort();
  const StopFile stop;
  const std::string script = stop.script("world $WORLD_SIZE");
  // 1 s of silence is death: far above a loaded machine's scheduling delays,
  // which would otherwise make a healthy agent miss its own deadline.
  const std::string conf = ",keep_alive_interval=0.5,keep_alive_max_attempt=2";
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::string host = i == 0 ? ",is_host=1" : ",is_host=0";
    nodes.push_back(startNode(dynamicOptions(port, i, "2:3", conf + host), script));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 6", 2)) << node.err;
  // SIGSTOP: the agent's connection stays open but it falls silent, like a
  // node cut off from the network.
  nodes[2].process->signal(SIGSTOP);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(nodes[i].waitFor("world 4", 2)) << nodes[i].err;
  EXPECT_NE(nodes[0].err.find("no heartbeat"), std::string::npos) << nodes[0].err;
  stop.create();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(nodes[i].finish(), 0) << nodes[i].err;
  nodes[2].process->signal(SIGKILL);
  nodes[2].process->signal(SIGCONT);
}

// A frozen store (SIGSTOP: its kernel still acknowledges every byte, so TCP
// sees nothing wrong) ends every node within the keep-alive bound, as a dead
// one would: the heartbeat carries its own deadline.
TEST(MultiNode, FrozenStoreEndsEveryNode) {
  ChildProcess daemon = startLoopbackDaemon();
  const std::uint16_t port = daemonPort(daemon);
  ASSERT_NE(port, 0);
  std::vector<Node> nodes;
  for (int i = 1; i <= 2; ++i) {
    nodes.push_back(startNode(
        dynamicOptions(port, i, "2", ",is_host=0,keep_alive_interval=0.5,keep_alive_max_attempt=2"),
        "echo world $WORLD_SIZE; sleep 60"));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 4", 2)) << node.err;
  daemon.signal(SIGSTOP);
  for (auto& node : nodes) {
    EXPECT_EQ(node.finish(30s), 1) << node.err;
    EXPECT_NE(node.err.find("no heartbeat answered for 1.0 s (keep_alive_interval 0.5 s x "
                            "keep_alive_max_attempt 2)"),
              std::string::npos)
        << node.err;
  }
  daemon.signal(SIGKILL);
  daemon.signal(SIGCONT);
}

// A signal while the node's failure report waits on a frozen store ends the
// node at once (128+N): the report is not a round trip on the agent's loop,
// which would hold the signal until the store answered or the keep-alive
// bound (here 60 s) declared it lost.
TEST(MultiNode, ASignalWhileTheFailureReportWaitsEndsTheNodeAtOnce) {
  ChildProcess daemon = startLoopbackDaemon();
  const std::uint16_t port = daemonPort(daemon);
  ASSERT_NE(port, 0);
  const StopFile fail;
  Node node = startNode(
      dynamicOptions(port, 1, "1", ",is_host=0,keep_alive_interval=10,keep_alive_max_attempt=6"),
      fail.script("world $WORLD_SIZE") + "; exit 3",
      {{"DDPRUN_TOKEN", kToken}, {"DDPRUN_LOG_LEVEL", "debug"}});
  ASSERT_TRUE(node.waitFor("world 2", 2)) << node.err;
  daemon.signal(SIGSTOP);
  fail.create();
  ASSERT_TRUE(node.waitFor("Node: running -> deciding.", 1, 30s, true)) << node.err;
  node.process->signal(SIGTERM);
  EXPECT_EQ(node.finish(20s), 128 + SIGTERM) << node.err;
  EXPECT_NE(node.err.find("Node: deciding -> done."), std::string::npos) << node.err;
  daemon.signal(SIGKILL);
  daemon.signal(SIGCONT);
}

TEST(MultiNode, JobWideBudgetGivesEveryAgentTheSameRootCause) {
  const std::uint16_t port = freePort();
  // In a fresh folder: a flag left by an earlier run would fail rank 3 early.
  const std::string flag = (harness::scratch() / "printed").string();
  std::vector<Node> nodes;
  for (int r = 0; r < 2; ++r) {
    nodes.push_back(startNode(
        {"--nnodes=2", fmt::format("--node_rank={}", r), "--master_addr=127.0.0.1",
         fmt::format("--master_port={}", port), "--nproc_per_node=2", "--max_restarts=2",
         fmt::format("--local_addr=127.0.0.{}", r + 1)},
        // Rank 3 fails each attempt once rank 0 has printed (a file on this
        // machine stands in for the timing).
        "echo attempt $TORCHELASTIC_RESTART_COUNT; f=" + flag +
            "_$TORCHELASTIC_RESTART_COUNT; [ $RANK = 0 ] && touch $f; "
            "if [ $RANK = 3 ]; then i=0; while [ ! -e $f ] && [ $i -lt 1000 ]; do sleep 0.01; "
            "i=$((i+1)); done; echo broken >&2; exit 6; fi; sleep 10"));
  }
  for (auto& node : nodes) {
    EXPECT_EQ(node.finish(), 6) << node.err;
    EXPECT_NE(node.err.find("rank       : 3 (local_rank 1, node 1)"), std::string::npos)
        << node.err;
    EXPECT_NE(node.err.find("FAILED after 3 attempts"), std::string::npos) << node.err;
  }
  // Restarts are counted once per failed round for the whole job: 0, 1, 2.
  EXPECT_EQ(harness::linesWith(nodes[0].out, "[rank 0]: attempt "),
            (std::vector<std::string>{"0", "1", "2"}));
}

// A static job cannot leave a host out: the report names it as the
// repeated failure.
TEST(MultiNode, AStaticJobNamesTheHostThatFailedRoundAfterRound) {
  const std::uint16_t port = freePort();
  std::vector<Node> nodes;
  for (int r = 0; r < 2; ++r) {
    nodes.push_back(
        startNode({"--nnodes=2", fmt::format("--node_rank={}", r), "--master_addr=127.0.0.1",
                   fmt::format("--master_port={}", port), "--nproc_per_node=1", "--max_restarts=2",
                   "--restart_backoff_max=0", fmt::format("--local_addr=127.0.0.{}", r + 1)},
                  r == 1 ? "exit 5" : "sleep 20"));
  }
  for (auto& node : nodes) {
    EXPECT_EQ(node.finish(60s), 5) << node.err;
    EXPECT_NE(node.err.find("Repeated failure: workers on this node ("), std::string::npos)
        << node.err;
    EXPECT_NE(node.err.find("127.0.0.2) failed in 3 rounds in a row"), std::string::npos)
        << node.err;
  }
}

TEST(MultiNode, AWaitingNodeSaysWhatItWaitsForAndTimesOutNamingTheMissingNodes) {
  const std::uint16_t port = freePort();
  Node node = startNode({"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
                         fmt::format("--master_port={}", port), "--rdzv_conf=join_timeout=2"},
                        "true", {{"DDPRUN_TOKEN", kToken}, {"DDPRUN_PROGRESS_INTERVAL", "0.5"}});
  EXPECT_EQ(node.finish(), 1) << node.err;
  // stderr is a pipe here: whole lines, one per interval.
  const auto lines = harness::linesWith(node.err, "ddprun: waiting for nodes: ");
  EXPECT_GE(lines.size(), 2u) << node.err;
  for (const auto& line : lines) {
    EXPECT_TRUE(
        std::regex_match(line, std::regex("1 of 2 joined; missing: node rank 1 \\([0-9] s\\)")))
        << line;
  }
  const auto errors = harness::linesWith(node.err, "ddprun: error: ");
  ASSERT_EQ(errors.size(), 1u) << node.err;
  EXPECT_NE(errors[0].find(fmt::format("127.0.0.1:{}", port)), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("1 of 2 nodes joined; missing: node rank 1"), std::string::npos)
      << errors[0];
}

// One agent of a static job stopped by SIGTERM: it leaves, the others' round
// ends at once (no restart spent), and while they wait for it again they
// name it as the node that left; at the join timeout, so does their error.
TEST(MultiNode, ANodeStoppedBySigtermIsNamedByTheOthers) {
  const std::uint16_t port = freePort();
  const StopFile stop;
  std::vector<Node> nodes;
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(startNode({"--nnodes=3", fmt::format("--node_rank={}", r),
                               "--master_addr=127.0.0.1", fmt::format("--master_port={}", port),
                               "--nproc_per_node=1", fmt::format("--local_addr=127.0.0.{}", r + 1),
                               "--log_prefix=", "--rdzv_conf=join_timeout=4"},
                              stop.script("world $WORLD_SIZE"),
                              {{"DDPRUN_TOKEN", kToken}, {"DDPRUN_PROGRESS_INTERVAL", "0.5"}}));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("world 3", 1)) << node.err;
  nodes[2].process->signal(SIGTERM);
  EXPECT_EQ(nodes[2].finish(), 128 + SIGTERM) << nodes[2].err;
  const std::string left =
      "node rank 2, lost (it left the job (its ddprun exits with code 143, SIGTERM))";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(nodes[r].finish(30s), 1) << nodes[r].err;
    EXPECT_NE(nodes[r].err.find("Round 1 ended (node "), std::string::npos) << nodes[r].err;
    const auto waiting = harness::linesWith(nodes[r].err, "ddprun: waiting for nodes: ");
    ASSERT_FALSE(waiting.empty()) << nodes[r].err;
    for (const auto& line : waiting) EXPECT_NE(line.find(left), std::string::npos) << line;
    const auto errors = harness::linesWith(nodes[r].err, "ddprun: error: ");
    ASSERT_EQ(errors.size(), 1u) << nodes[r].err;
    // The second to time out names the first as a node that gave up.
    EXPECT_NE(errors[0].find(" of 3 nodes joined; missing: node "), std::string::npos)
        << nodes[r].err;
    EXPECT_NE(errors[0].find(left), std::string::npos) << nodes[r].err;
    EXPECT_EQ(nodes[r].err.find("of round -1"), std::string::npos) << nodes[r].err;
  }
}

// A worker that fails after the other node's workers all finished (a crash
// in its teardown) is not restarted (the finished node would never rejoin):
// its node exits with the worker's code and report at once, and the store's
// host, done, exits 0 once it has left.
TEST(MultiNode, AFailureAfterTheOtherNodeFinishedEndsWithThatFailure) {
  const std::uint16_t port = freePort();
  const StopFile stop;
  const auto options = [port](int index, const std::string& conf) {
    std::vector<std::string> all = dynamicOptions(port, index, "2", conf);
    all.back() = "--max_restarts=3";
    return all;
  };
  Node host = startNode(options(0, ",is_host=1"), "echo finished");
  Node other = startNode(options(1, ",is_host=0"), stop.script("waiting") + "; exit 7");
  ASSERT_TRUE(host.waitFor("finished", 2)) << host.err;
  ASSERT_TRUE(host.waitFor("keeping the store up until every node left", 1, 20s, true)) << host.err;
  stop.create();
  EXPECT_EQ(other.finish(), 7) << other.err;
  EXPECT_NE(other.err.find("exit       : 7"), std::string::npos) << other.err;
  EXPECT_EQ(other.err.find("lost the rendezvous store"), std::string::npos) << other.err;
  EXPECT_EQ(other.err.find("Restarting"), std::string::npos) << other.err;
  EXPECT_EQ(host.finish(), 0) << host.err;
}

TEST(MultiNode, ProgressLinesCanBeTurnedOffAndABadIntervalIsRefused) {
  const std::uint16_t port = freePort();
  const std::vector<std::string> options = {
      "--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
      fmt::format("--master_port={}", port), "--rdzv_conf=join_timeout=1"};
  Node quiet = startNode(options, "true", {{"DDPRUN_PROGRESS_INTERVAL", "0"}});
  EXPECT_EQ(quiet.finish(), 1);
  EXPECT_EQ(quiet.err.find("waiting for"), std::string::npos) << quiet.err;
  Node bad = startNode(options, "true", {{"DDPRUN_PROGRESS_INTERVAL", "soon"}});
  EXPECT_EQ(bad.finish(), 2);
  EXPECT_NE(bad.err.find("DDPRUN_PROGRESS_INTERVAL=soon is not a number of seconds"),
            std::string::npos)
      << bad.err;
}

TEST(MultiNode, EveryNodePointsAtTheStandaloneDaemon) {
  ChildProcess daemon = startLoopbackDaemon();
  const std::uint16_t port = daemonPort(daemon);
  ASSERT_NE(port, 0);
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    auto options = dynamicOptions(port, i + 1, "2", ",is_host=0");
    nodes.push_back(startNode(options, "echo world $WORLD_SIZE rank $RANK"));
  }
  for (auto& node : nodes) {
    EXPECT_EQ(node.finish(), 0) << node.err;
    EXPECT_NE(node.out.find("world 4"), std::string::npos) << node.out;
    EXPECT_EQ(node.err.find("hosted here"), std::string::npos);
  }
  // A node with the wrong token is refused.
  auto options = dynamicOptions(port, 3, "2");
  Node intruder = startNode(options, "true", {{"DDPRUN_TOKEN", "wrong"}});
  EXPECT_NE(intruder.finish(), 0);
  EXPECT_NE(intruder.err.find("token is wrong"), std::string::npos) << intruder.err;
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0);
}

// The default on several nodes (node relays, a token): between hosts only
// the agents' protocol; a PyTorch TCPStore client is refused by the job's
// store at its first byte, even from a member node's address.
TEST(MultiNode, WithRelaysNoTcpStoreClientReachesTheJobsStore) {
  const std::uint16_t port = freePort();
  const std::string attacker =
      std::string(DDPRUN_SOURCE_DIR) + "/tests/integration/scripts/store_attacker.py";
  const StopFile stop;
  std::vector<Node> nodes;
  for (int r = 0; r < 2; ++r) {
    nodes.push_back(
        startNode({"--nnodes=2", fmt::format("--node_rank={}", r), "--master_addr=127.0.0.1",
                   fmt::format("--master_port={}", port), "--nproc_per_node=1", "--rdzv_id=job",
                   fmt::format("--local_addr=127.0.0.{}", r + 1), "--log_prefix="},
                  stop.script("ready $MASTER_ADDR")));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("ready 127.0.0.1")) << node.err;
  ChildProcess tcp({"/usr/bin/python3", attacker, "tcpstore", "127.0.0.1", std::to_string(port),
                    "127.0.0.2", "job"});
  ASSERT_EQ(tcp.wait(20s), 0) << tcp.stderrText();
  EXPECT_EQ(tcp.stdoutText().rfind("closed", 0), 0u) << tcp.stdoutText();
  stop.create();
  for (auto& node : nodes) EXPECT_EQ(node.finish(), 0) << node.err;
}

// docs/security.md on a real two-node job with a token, in torchrun's model
// (--store_relay=off): a worker (holding only its credential) tries to end
// the job; TCPStore clients (no token) from a member address and from a
// foreign one overwrite and delete what they can reach and set the control
// key that used to end a job. The job finishes with exit 0 on both nodes.
// (With the relays, the default, TCPStore clients are refused from every
// address: WithRelaysNoTcpStoreClientReachesTheJobsStore.)
TEST(MultiNode, AttacksFromWorkersAndTcpStoreClientsCannotEndTheJob) {
  const std::uint16_t port = freePort();
  const std::string attacker =
      std::string(DDPRUN_SOURCE_DIR) + "/tests/integration/scripts/store_attacker.py";
  std::vector<Node> nodes;
  for (int r = 0; r < 2; ++r) {
    nodes.push_back(
        startNode({"--nnodes=2", fmt::format("--node_rank={}", r), "--master_addr=127.0.0.1",
                   fmt::format("--master_port={}", port), "--nproc_per_node=2", "--rdzv_id=job",
                   fmt::format("--local_addr=127.0.0.{}", r + 1),
                   "--log_prefix=", "--max_restarts=0", "--store_relay=off"},
                  "if [ $RANK = 0 ]; then /usr/bin/python3 " + attacker +
                      " native $DDPRUN_STORE_HOST $DDPRUN_STORE_PORT \"$DDPRUN_TOKEN\" job; fi; "
                      "echo ready $RANK; sleep 3; echo done $RANK"));
  }
  ASSERT_TRUE(nodes[0].waitFor("ready 0")) << nodes[0].err;
  for (const char* source : {"127.0.0.1", "127.0.0.9"}) {
    ChildProcess tcp({"/usr/bin/python3", attacker, "tcpstore", "127.0.0.1", std::to_string(port),
                      source, "job"});
    ASSERT_EQ(tcp.wait(20s), 0) << tcp.stderrText();
    const std::string seen = tcp.stdoutText();
    if (std::string(source) == "127.0.0.9") {
      EXPECT_EQ(seen.rfind("closed", 0), 0u) << "a foreign TCPStore client is refused: " << seen;
    } else {
      EXPECT_EQ(seen.substr(0, seen.find('\n')).find("control"), std::string::npos)
          << "control keys are not listed: " << seen;
      EXPECT_NE(seen.find("after control key closed"), std::string::npos) << seen;
    }
  }
  for (auto& node : nodes) EXPECT_EQ(node.finish(), 0) << node.err;
  const std::string& out = nodes[0].out;
  for (const char* line :
       {"hello 0", "report_failure 2", "leave 2", "set_control 2", "set_other_job 2"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << " in\n" << out;
  }
  EXPECT_EQ(out.find("report_failure 0"), std::string::npos) << out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(nodes[rank / 2].out.find(fmt::format("done {}", rank)), std::string::npos)
        << nodes[rank / 2].out;
  }
}

TEST(MultiNode, AnOpenDaemonServesNodesWithoutAToken) {
  // Without a token the daemon refuses to start unless told --open.
  ChildProcess refused({kBinDir + "/ddprun-rendezvous", "--port", "0"}, {{"DDPRUN_TOKEN", ""}});
  EXPECT_EQ(refused.wait(10s), 2);
  EXPECT_NE(refused.stderrText().find("or pass --open"), std::string::npos);
  ChildProcess daemon(
      {kBinDir + "/ddprun-rendezvous", "--host", "127.0.0.1", "--port", "0", "--open"},
      {{"DDPRUN_TOKEN", ""}});
  const std::uint16_t port = daemonPort(daemon);
  ASSERT_NE(port, 0);
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(startNode(dynamicOptions(port, i + 1, "2", ",is_host=0"),
                              "echo world $WORLD_SIZE", {{"DDPRUN_TOKEN", ""}}));
  }
  for (auto& node : nodes) {
    EXPECT_EQ(node.finish(), 0) << node.err;
    EXPECT_NE(node.out.find("world 4"), std::string::npos) << node.out;
  }
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0);
  EXPECT_NE(daemon.stderrText().find("the store is open (--open"), std::string::npos);
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

using harness::httpGet;
using harness::parseMetrics;

// A ddprun-rendezvous with the job's token and a metrics endpoint, both
// on free ports (the daemon prints them: the store's, then the metrics').
struct MetricsDaemon {
  ChildProcess process{
      {kBinDir + "/ddprun-rendezvous", "--host", "127.0.0.1", "--port", "0", "--metrics_port", "0"},
      {{"DDPRUN_TOKEN", kToken}}};
  std::uint16_t port = 0;
  std::uint16_t metricsPort = 0;

  // False when the daemon did not say where it listens.
  bool started() {
    port = daemonPort(process);
    const auto line = process.readStdoutLine(10s);
    if (port == 0 || !line || !line->starts_with("metrics on http://127.0.0.1:")) return false;
    metricsPort = static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
    return true;
  }
};

TEST(MultiNode, TheDaemonsMetricsFollowTheJob) {
  MetricsDaemon daemon;
  ASSERT_TRUE(daemon.started()) << daemon.process.stderrText();
  const std::uint16_t port = daemon.port;
  const std::uint16_t metricsPort = daemon.metricsPort;
  const auto dir = harness::scratch();
  // Round 1: rank 3 fails; round 2 waits for `go`.
  const std::string script = fmt::format(
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then exit 3; fi; sleep 60; "
      "fi; echo round2; while [ ! -e {}/go ]; do sleep 0.05; done",
      dir.string());
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    auto options = dynamicOptions(port, i + 1, "2", ",is_host=0");
    options.back() = "--max_restarts=2";
    nodes.push_back(startNode(options, script));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("round2", 2, 30s)) << node.err;
  const auto [status, body] = httpGet(metricsPort, "/metrics");
  ASSERT_EQ(status, "HTTP/1.1 200 OK") << body;
  const auto m = parseMetrics(body);
  EXPECT_EQ(m.at("ddprun_rendezvous_rounds_total{rdzv_id=\"job\"}"), 2);
  EXPECT_EQ(m.at("ddprun_rendezvous_running{rdzv_id=\"job\"}"), 1);
  EXPECT_EQ(m.at("ddprun_rendezvous_members{rdzv_id=\"job\"}"), 2);
  EXPECT_EQ(m.at("ddprun_rendezvous_restarts_used{rdzv_id=\"job\"}"), 1);
  EXPECT_EQ(m.at("ddprun_rendezvous_restarts_left{rdzv_id=\"job\"}"), 1);
  EXPECT_EQ(m.at("ddprun_rendezvous_failures_total{rdzv_id=\"job\"}"), 1);
  EXPECT_EQ(m.at("ddprun_rendezvous_closed{rdzv_id=\"job\"}"), 0);
  EXPECT_GE(m.at("ddprun_store_connections{dialect=\"native\"}"), 2);  // the agents
  EXPECT_GE(m.at("ddprun_store_operations_total{dialect=\"native\",op=\"JOIN\"}"), 4);
  EXPECT_EQ(m.at("ddprun_store_operations_total{dialect=\"native\",op=\"REPORT_FAILURE\"}"), 1);
  EXPECT_GT(m.at("ddprun_store_received_bytes_total"), 0);
  EXPECT_GT(m.at("ddprun_store_sent_bytes_total"), 0);
  EXPECT_GT(m.at("ddprun_store_data_bytes{kind=\"limit\"}"), 0);
  EXPECT_TRUE(m.contains("ddprun_store_buffered_bytes{kind=\"used\"}"));
  EXPECT_TRUE(m.contains("ddprun_store_clients_rejected_total"));
  EXPECT_TRUE(m.contains("ddprun_store_waits"));
  // Only /metrics is served.
  EXPECT_EQ(httpGet(metricsPort, "/").first, "HTTP/1.1 404 Not Found");
  std::ofstream(dir / "go").put('1');
  for (auto& node : nodes) EXPECT_EQ(node.finish(), 0) << node.err;
  daemon.process.signal(SIGTERM);
  EXPECT_EQ(daemon.process.wait(10s), 0);
}

// With relays, each node's workers reach their store through it; the
// agents publish their relays' counters where the rendezvous lives: the
// daemon's /metrics and `ddprun status` show them per node.
TEST(MultiNode, TheRelaysCountersShowInStatusAndMetrics) {
  if (harness::ChildProcess({"/usr/bin/python3", "-c", "import torch"}).wait(60s) != 0) {
    GTEST_SKIP() << "Debian's python3-torch is not installed (scripts/setup)";
  }
  MetricsDaemon daemon;
  ASSERT_TRUE(daemon.started()) << daemon.process.stderrText();
  const std::uint16_t port = daemon.port;
  const std::uint16_t metricsPort = daemon.metricsPort;
  const StopFile stop;
  // Each worker is a PyTorch 1.13 TCPStore client at MASTER_ADDR:MASTER_PORT.
  const std::string script =
      "/usr/bin/python3 -c \"import os, torch.distributed as d; "
      "s = d.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']), None, False); "
      "print('added', s.add('count', 1), os.environ['MASTER_ADDR'], flush=True)\"; " +
      stop.script("waiting");
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    auto options = dynamicOptions(port, i + 1, "2", ",is_host=0");
    options.push_back("--store_relay=on");
    nodes.push_back(startNode(options, script));
  }
  for (auto& node : nodes) ASSERT_TRUE(node.waitFor("waiting", 2, 60s)) << node.err;
  for (auto& node : nodes) EXPECT_NE(node.out.find("127.0.0.1"), std::string::npos) << node.out;
  // Published every few seconds: wait for both nodes' two requests.
  std::map<std::string, double> m;
  double requests = 0;
  const bool published = harness::waitUntil(
      [&] {
        m = parseMetrics(httpGet(metricsPort, "/metrics").second);
        requests = 0;
        for (const auto& [name, value] : m) {
          if (name.starts_with("ddprun_relay_requests{rdzv_id=\"job\",node=")) requests += value;
        }
        return requests >= 4;
      },
      60s, 200ms);
  EXPECT_TRUE(published);
  EXPECT_EQ(requests, 4);  // each node: its two workers' ADD
  EXPECT_TRUE(m.contains("ddprun_store_connections_by_address{address=\"127.0.0.2\"}"));
  EXPECT_TRUE(m.contains("ddprun_store_connections_by_address{address=\"127.0.0.3\"}"));
  const auto status = harness::runDdprun(
      {"status", fmt::format("--rdzv_endpoint=127.0.0.1:{}", port), "--rdzv_id=job"},
      {{"DDPRUN_TOKEN", kToken}});
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("RELAY"), std::string::npos) << status.out;
  // Both nodes' lines: their workers have closed their connections by now.
  std::size_t relayed = 0;
  for (std::size_t at = status.out.find("workers, 2 requests"); at != std::string::npos;
       at = status.out.find("workers, 2 requests", at + 1)) {
    ++relayed;
  }
  EXPECT_EQ(relayed, 2u) << status.out;
  stop.create();
  for (auto& node : nodes) EXPECT_EQ(node.finish(), 0) << node.err;
  daemon.process.signal(SIGTERM);
  EXPECT_EQ(daemon.process.wait(10s), 0);
}

// Each agent publishes its node's downtime where the rendezvous lives: the
// daemon's /metrics has each node's incidents, lost seconds, goodput and a
// histogram per phase, and `ddprun status` a DOWNTIME column. The workers
// are shell scripts that report their group and first step on
// DDPRUN_PROGRESS_PIPE themselves (docs/env.md); node 1's local rank 0
// fails once.
TEST(MultiNode, EachNodesDowntimeShowsInMetricsAndStatus) {
  MetricsDaemon daemon;
  ASSERT_TRUE(daemon.started()) << daemon.process.stderrText();
  const StopFile stop;
  // As in a real job, no rank steps before every rank formed its group.
  const std::string formed = (harness::scratch() / "formed").string();
  const std::string script =
      "d=" + formed +
      R"(/$GROUP_RANK-$TORCHELASTIC_RESTART_COUNT; mkdir -p $d; )"
      R"(echo "{\"pid\": $$, \"event\": \"process_group\", \"step\": 0}" > "$DDPRUN_PROGRESS_PIPE"; )"
      R"(touch $d/$LOCAL_RANK; while [ $(ls $d | wc -l) -lt 2 ]; do sleep 0.05; done; )"
      R"(echo "{\"pid\": $$, \"event\": \"step\", \"step\": 1}" > "$DDPRUN_PROGRESS_PIPE"; )"
      R"(if [ "$GROUP_RANK$LOCAL_RANK$TORCHELASTIC_RESTART_COUNT" = 100 ]; then exit 3; fi; )" +
      stop.script("waiting");
  std::vector<Node> nodes;
  for (int i = 0; i < 2; ++i) {
    auto options = dynamicOptions(daemon.port, i + 1, "2", ",is_host=0");
    std::replace(options.begin(), options.end(), std::string("--max_restarts=0"),
                 std::string("--max_restarts=1"));
    nodes.push_back(startNode(options, script));
  }
  std::map<std::string, double> m;
  // Each node's value of `name` (its series are labelled rdzv_id, node).
  const auto values = [&m](const std::string& name) {
    std::vector<double> out;
    for (const auto& [key, value] : m) {
      if (key.starts_with(name + "{rdzv_id=\"job\",node=")) out.push_back(value);
    }
    return out;
  };
  // Published when an incident ends: both nodes' workers stepped again.
  const bool published = harness::waitUntil(
      [&] {
        m = parseMetrics(httpGet(daemon.metricsPort, "/metrics").second);
        std::size_t ended = 0;
        for (const auto& [key, value] : m) {
          ended += key.starts_with("ddprun_incident_phase_seconds_count{") &&
                   key.find("phase=\"first_step\"") != std::string::npos && value == 1;
        }
        return ended == 2;
      },
      90s, 200ms);
  EXPECT_EQ(values("ddprun_incidents_total"), (std::vector<double>{1, 1}));
  if (!published) {
    stop.create();
    for (auto& node : nodes) node.finish();
  }
  ASSERT_TRUE(published) << httpGet(daemon.metricsPort, "/metrics").second << nodes[0].err
                         << nodes[1].err;
  for (double lost : values("ddprun_lost_seconds_total")) EXPECT_GT(lost, 0);
  for (double goodput : values("ddprun_goodput")) {
    EXPECT_GE(goodput, 0);
    EXPECT_LE(goodput, 1);
  }
  EXPECT_EQ(values("ddprun_goodput").size(), 2u);
  // One observation of each phase per node, in the +Inf bucket and the count.
  std::size_t counts = 0, infinite = 0;
  for (const auto& [key, value] : m) {
    if (key.starts_with("ddprun_incident_phase_seconds_count{") && value == 1) ++counts;
    if (key.starts_with("ddprun_incident_phase_seconds_bucket{") &&
        key.find("le=\"+Inf\"") != std::string::npos && value == 1) {
      ++infinite;
    }
  }
  EXPECT_EQ(counts, 14u) << httpGet(daemon.metricsPort, "/metrics").second;  // 2 nodes x 7 phases
  EXPECT_EQ(infinite, 14u);
  const auto status = harness::runDdprun(
      {"status", fmt::format("--rdzv_endpoint=127.0.0.1:{}", daemon.port), "--rdzv_id=job"},
      {{"DDPRUN_TOKEN", kToken}});
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("DOWNTIME"), std::string::npos) << status.out;
  std::size_t lines = 0;
  for (auto at = status.out.find("1 incident, "); at != std::string::npos;
       at = status.out.find("1 incident, ", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << status.out;
  const auto json =
      harness::runDdprun({"status", fmt::format("--rdzv_endpoint=127.0.0.1:{}", daemon.port),
                          "--rdzv_id=job", "--json"},
                         {{"DDPRUN_TOKEN", kToken}});
  EXPECT_NE(json.out.find("\"downtime\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"goodput\""), std::string::npos) << json.out;
  stop.create();
  for (auto& node : nodes) EXPECT_EQ(node.finish(), 0) << node.err;
  daemon.process.signal(SIGTERM);
  EXPECT_EQ(daemon.process.wait(10s), 0);
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

// A job's store may hold a connection per rank, most of them blocked in a
// wait: a waiting connection holds no input buffer (what /metrics reports
// as the buffer budget's use stays far below 64 KiB per connection).
TEST(MultiNode, WaitingConnectionsHoldNoInputBuffer) {
  ChildProcess daemon({kBinDir + "/ddprun-rendezvous", "--host", "127.0.0.1", "--port", "0",
                       "--open", "--metrics_port", "0"},
                      {});
  const std::uint16_t port = daemonPort(daemon);
  ASSERT_NE(port, 0);
  const auto metricsLine = daemon.readStdoutLine(10s);
  ASSERT_TRUE(metricsLine);
  const auto metricsPort =
      static_cast<std::uint16_t>(std::stoi(metricsLine->substr(metricsLine->rfind(':') + 1)));
  // PyTorch 1.13's WAIT ["/never"]: opcode 5, u64 count, u64 length, key.
  std::string wait(1, '\x05');
  const auto putU64 = [&](std::uint64_t v) { wait.append(reinterpret_cast<char*>(&v), 8); };
  putU64(1);
  putU64(6);
  wait += "/never";
  constexpr int kConnections = 300;
  std::vector<int> sockets;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::write(fd, wait.data(), wait.size()), static_cast<ssize_t>(wait.size()));
    sockets.push_back(fd);
  }
  std::map<std::string, double> m;
  for (int attempt = 0; attempt < 200; ++attempt) {  // until every wait is registered
    m = parseMetrics(httpGet(metricsPort, "/metrics").second);
    if (m["ddprun_store_waits"] >= kConnections) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(m["ddprun_store_waits"], kConnections);
  EXPECT_EQ(m["ddprun_store_connections{dialect=\"tcpstore\"}"], kConnections);
  EXPECT_LT(m["ddprun_store_buffered_bytes{kind=\"used\"}"], kConnections * 1024.0);
  for (int fd : sockets) ::close(fd);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0);
}

}  // namespace
}  // namespace ddprun
