#include "ddprun/common/slurm.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ddprun/common/error.h"

namespace ddprun {
namespace {

using Hosts = std::vector<std::string>;

// --- expandHostlist: valid input ---------------------------------------------

struct HostlistCase {
  const char* name;
  const char* input;
  Hosts expected;
};

// The expected lists are what `scontrol show hostnames` prints, except where
// a comment says ddprun accepts more than Slurm's hostlist_create().
const HostlistCase kHostlistCases[] = {
    {"PlainName", "node1", {"node1"}},
    {"PlainNameWithoutDigits", "login", {"login"}},
    // The reference's example; NNHandler returns the whole string.
    {"ReferenceExample",
     "node[01-04,7],gpu-a3",
     {"node01", "node02", "node03", "node04", "node7", "gpu-a3"}},
    // NNHandler returns the whole string.
    {"TwoPlainNames", "alpha,beta", {"alpha", "beta"}},
    // NNHandler returns "gpu-a3,node01".
    {"PlainNameFirst", "gpu-a3,node[01-04]", {"gpu-a3", "node01", "node02", "node03", "node04"}},
    // Padding from the written start; py-hostlist strips it.
    {"PaddingCrossesWidth", "n[009-011]", {"n009", "n010", "n011"}},
    {"PaddingTwoDigits", "node[08-11]", {"node08", "node09", "node10", "node11"}},
    {"NoPaddingGrowsWidth", "node[8-11]", {"node8", "node9", "node10", "node11"}},
    {"PaddingThreeDigits", "node[001-003]", {"node001", "node002", "node003"}},
    {"PaddingPastHundred", "n[098-101]", {"n098", "n099", "n100", "n101"}},
    // Width comes from the start only: 1-010 is 1..10 unpadded.
    {"WidthFromStartOnly",
     "n[1-010]",
     {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
    {"PaddingPerRange", "n[01-02,3,004]", {"n01", "n02", "n3", "n004"}},
    // MPICH #5653 rejected this.
    {"OneLetterPrefix", "c[1-2]", {"c1", "c2"}},
    // ignite #2203: prefixes with dashes and digits.
    {"DashedPrefix", "node-gpu-[01-02],login-1", {"node-gpu-01", "node-gpu-02", "login-1"}},
    // SkyPilot #8891's example.
    {"SkyPilotExample",
     "ml-16-node-[001-002,004],ml-17-node-[001-003]",
     {"ml-16-node-001", "ml-16-node-002", "ml-16-node-004", "ml-17-node-001", "ml-17-node-002",
      "ml-17-node-003"}},
    // Several groups: the first varies slowest.
    {"TwoGroups",
     "rack[1-2]-node[01-02]",
     {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
    {"ThreeGroups",
     "x[1-2]y[1-2]z[1-2]",
     {"x1y1z1", "x1y1z2", "x1y2z1", "x1y2z2", "x2y1z1", "x2y1z2", "x2y2z1", "x2y2z2"}},
    // Text after the last bracket: Slurm's hostlist_create() refuses it,
    // pdsh-style tools accept it; ddprun accepts it.
    {"SuffixAfterBracket", "gpu[1-2]-ib", {"gpu1-ib", "gpu2-ib"}},
    {"SuffixAfterEveryGroup", "a[1-2]b[3-4]c", {"a1b3c", "a1b4c", "a2b3c", "a2b4c"}},
    {"DomainSuffix", "node[01-02].ib.cluster", {"node01.ib.cluster", "node02.ib.cluster"}},
    {"FullyQualifiedNames",
     "node-10.cluster.local,node-11.cluster.local",
     {"node-10.cluster.local", "node-11.cluster.local"}},
    {"SingleNumbers", "node[1,3,5]", {"node1", "node3", "node5"}},
    {"MixedRanges", "node[1-3,5-6]", {"node1", "node2", "node3", "node5", "node6"}},
    {"OrderAndDuplicatesKept", "n[2,1,2]", {"n2", "n1", "n2"}},
    {"RangeOfOne", "n[5-5]", {"n5"}},
    {"Zero", "n[0]", {"n0"}},
    {"PaddedSingle", "n[007]", {"n007"}},
    {"BracketsOnly", "[1-3]", {"1", "2", "3"}},
    {"SameNameTwice", "tux[0-1],tux[3]", {"tux0", "tux1", "tux3"}},
    // Whitespace separates at the top level, like ','; empty entries vanish.
    {"WhitespaceSeparated", "a b\tc", {"a", "b", "c"}},
    {"StrayWhitespaceAndCommas", " node[1-2] , gpu1 ,, ", {"node1", "node2", "gpu1"}},
    {"NewlineSeparated", "node[1-2]\nnode[5]\n", {"node1", "node2", "node5"}},
    {"CommaInsideBracketDoesNotSplit", "a[1,2],b", {"a1", "a2", "b"}},
};

class ExpandHostlist : public ::testing::TestWithParam<HostlistCase> {};

TEST_P(ExpandHostlist, MatchesScontrolShowHostnames) {
  const HostlistCase& c = GetParam();
  EXPECT_EQ(expandHostlist(c.input), c.expected) << "input: '" << c.input << "'";
}

INSTANTIATE_TEST_SUITE_P(Table, ExpandHostlist, ::testing::ValuesIn(kHostlistCases),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(ExpandHostlistSize, ExpandsLargeButSaneLists) {
  const Hosts hosts = expandHostlist("node[00001-20000]");
  ASSERT_EQ(hosts.size(), 20000u);
  EXPECT_EQ(hosts.front(), "node00001");
  EXPECT_EQ(hosts.back(), "node20000");
  // Exactly at the limit is allowed.
  EXPECT_EQ(expandHostlist("n[1-1000]x[1-1000]").size(), kMaxHostlistHosts);
}

// --- expandHostlist: malformed input ---------------------------------------

struct BadHostlistCase {
  const char* name;
  const char* input;
  const char* errorSubstring;
};

const BadHostlistCase kBadHostlistCases[] = {
    {"Empty", "", "names no hosts"},
    {"OnlySeparators", " , ,\t", "names no hosts"},
    {"UnclosedBracket", "node[1-3", "never closed"},
    {"UnclosedBracketSwallowsRest", "node[1-3,gpu1", "'node[1-3,gpu1'"},
    {"StrayClosingBracket", "node1-3]", "no matching '['"},
    {"NestedBrackets", "node[[1-2]]", "nested"},
    {"EmptyBrackets", "node[]", "holds no numbers"},
    {"ReversedRange", "node[5-3]", "'5-3' is reversed"},
    {"ReversedRangeNamesItsEntry", "node[1-2],gpu[3-1]", "'gpu[3-1]'"},
    {"LettersInRange", "node[a-c]", "not a number"},
    {"LetterAsEnd", "node[1-b]", "not a number"},
    {"PlusSign", "node[+1]", "not a number"},
    {"ThreeBounds", "node[1-2-3]", "not a number"},
    {"EmptyRangeInMiddle", "node[1,,2]", "empty range"},
    {"TrailingComma", "node[1,]", "empty range"},
    {"NegativeNumber", "node[-3]", "no start"},
    {"MissingEnd", "node[1-]", "no end"},
    {"WhitespaceInBrackets", "node[1, 2]", "whitespace"},
    {"BlueGeneBox", "bgl[123x456]", "BlueGene"},
    {"HugeNumber", "node[1-99999999999999999999]", "too large"},
    {"AbsurdRange", "node[0-1000000]", "more than 1000000 hosts"},
    {"AbsurdProduct", "a[0-999]b[0-999]c[0-9]", "more than 1000000 hosts"},
    {"AbsurdAcrossEntries", "a[1-600000],b[1-600000]", "at entry 'b[1-600000]'"},
};

class ExpandBadHostlist : public ::testing::TestWithParam<BadHostlistCase> {};

TEST_P(ExpandBadHostlist, ThrowsConfigErrorNamingTheProblem) {
  const BadHostlistCase& c = GetParam();
  try {
    const Hosts hosts = expandHostlist(c.input);
    ADD_FAILURE() << "'" << c.input << "' expanded to " << hosts.size() << " hosts";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(c.errorSubstring), std::string::npos)
        << "message: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ExpandBadHostlist, ::testing::ValuesIn(kBadHostlistCases),
                         [](const auto& test) { return std::string(test.param.name); });

// --- expandTasksPerNode ------------------------------------------------------

TEST(ExpandTasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expandTasksPerNode("8"), (std::vector<int>{8}));
  EXPECT_EQ(expandTasksPerNode("4(x2)"), (std::vector<int>{4, 4}));
  EXPECT_EQ(expandTasksPerNode("1,2,3"), (std::vector<int>{1, 2, 3}));
}

TEST(ExpandTasksPerNode, RejectsMalformedCounts) {
  for (const char* bad : {"", "2(x)", "2(3)", "a", "0", "2(x3", "2,,1", "(x2)", "2(x0)"}) {
    EXPECT_THROW(expandTasksPerNode(bad), ConfigError) << "'" << bad << "'";
  }
}

// --- detectSlurm ---------------------------------------------------------------

using Env = std::map<std::string, std::string>;

// One agent per node, this process on the second node (srun
// --ntasks-per-node=1 in a two-node job).
Env agentOnSecondNode() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_NODEID", "1"},
          {"SLURM_PROCID", "1"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"}};
}

TEST(DetectSlurm, AbsentWithoutJobId) {
  EXPECT_FALSE(detectSlurm({}).has_value());
  EXPECT_FALSE(detectSlurm({{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}}).has_value());
  Env env = agentOnSecondNode();
  env["SLURM_JOB_ID"] = "";  // `SLURM_JOB_ID= ddprun ...` opts out
  EXPECT_FALSE(detectSlurm(env).has_value());
}

TEST(DetectSlurm, ReadsOneAgentPerNode) {
  const auto job = detectSlurm(agentOnSecondNode());
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->jobId, "4242");
  EXPECT_EQ(job->nnodes, 2);
  EXPECT_EQ(job->nodeRank, 1);
  EXPECT_EQ(job->ntasks, 2);
  EXPECT_EQ(job->procId, 1);
  EXPECT_EQ(job->localId, 0);
  EXPECT_EQ(job->hosts, (Hosts{"gpu07", "gpu08"}));
  EXPECT_EQ(job->masterHost(), "gpu07");
  EXPECT_EQ(job->tasksPerNode, (std::vector<int>{1, 1}));
  EXPECT_EQ(job->tasksOnThisNode(), 1);
}

TEST(DetectSlurm, ShowsTheWrongLayout) {
  // srun --ntasks-per-node=8: eight agents per node; the launcher can see it.
  Env env = agentOnSecondNode();
  env["SLURM_NTASKS"] = "16";
  env["SLURM_PROCID"] = "13";
  env["SLURM_LOCALID"] = "5";
  env["SLURM_TASKS_PER_NODE"] = "8(x2)";
  const auto job = detectSlurm(env);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->tasksOnThisNode(), 8);
  EXPECT_EQ(job->localId, 5);
}

TEST(DetectSlurm, PrefersTheStepOverTheAllocation) {
  // srun -N2 inside a four-node allocation: SLURM_NODEID counts in the step.
  const Env env = {{"SLURM_JOB_ID", "77"},
                   {"SLURM_JOB_NUM_NODES", "4"},
                   {"SLURM_JOB_NODELIST", "n[1-4]"},
                   {"SLURM_STEP_NUM_NODES", "2"},
                   {"SLURM_STEP_NODELIST", "n[3-4]"},
                   {"SLURM_NNODES", "2"},
                   {"SLURM_NODELIST", "n[3-4]"},
                   {"SLURM_NODEID", "0"},
                   {"SLURM_PROCID", "0"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NTASKS", "2"}};
  const auto job = detectSlurm(env);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->nnodes, 2);
  EXPECT_EQ(job->hosts, (Hosts{"n3", "n4"}));
  EXPECT_EQ(job->masterHost(), "n3");
}

TEST(DetectSlurm, FallsBackToOlderNames) {
  const Env env = {{"SLURM_JOB_ID", "9"},
                   {"SLURM_JOB_NUM_NODES", "3"},
                   {"SLURM_NODELIST", "a,b[1-2]"},
                   {"SLURM_NODEID", "2"}};
  const auto job = detectSlurm(env);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->nnodes, 3);
  EXPECT_EQ(job->nodeRank, 2);
  EXPECT_EQ(job->hosts, (Hosts{"a", "b1", "b2"}));
  EXPECT_EQ(job->ntasks, 1);
  EXPECT_TRUE(job->tasksPerNode.empty());
  EXPECT_FALSE(job->tasksOnThisNode().has_value());
}

TEST(DetectSlurm, OneNodeOutsideAStepDefaultsToRankZero) {
  // An salloc shell: no SLURM_NODEID/PROCID/LOCALID/NTASKS.
  const auto job =
      detectSlurm({{"SLURM_JOB_ID", "5"}, {"SLURM_NNODES", "1"}, {"SLURM_JOB_NODELIST", "node17"}});
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->nodeRank, 0);
  EXPECT_EQ(job->procId, 0);
  EXPECT_EQ(job->localId, 0);
  EXPECT_EQ(job->ntasks, 1);
  EXPECT_EQ(job->masterHost(), "node17");
}

struct BadEnvCase {
  const char* name;
  std::map<std::string, std::string> changes;  // applied to agentOnSecondNode(); "" erases
  const char* errorSubstring;
};

const BadEnvCase kBadEnvCases[] = {
    {"NodesNotANumber", {{"SLURM_NNODES", "two"}}, "SLURM_NNODES='two' is not a whole number"},
    {"NodesZero", {{"SLURM_NNODES", "0"}}, "SLURM_NNODES=0 is below 1"},
    {"NodesHuge", {{"SLURM_NNODES", "99999999999"}}, "not a whole number"},
    {"NodeIdNegative", {{"SLURM_NODEID", "-1"}}, "SLURM_NODEID='-1'"},
    {"NodeIdOutOfRange", {{"SLURM_NODEID", "2"}}, "SLURM_NODEID=2 is not below SLURM_NNODES=2"},
    {"ProcIdOutOfRange", {{"SLURM_PROCID", "2"}}, "SLURM_PROCID=2 is not below SLURM_NTASKS=2"},
    {"LocalIdNotANumber", {{"SLURM_LOCALID", "0x1"}}, "SLURM_LOCALID='0x1'"},
    {"NtasksZero", {{"SLURM_NTASKS", "0"}}, "SLURM_NTASKS=0 is below 1"},
    {"BadNodelist", {{"SLURM_JOB_NODELIST", "gpu[07-08"}}, "SLURM_JOB_NODELIST: bad hostlist"},
    {"NodelistDisagreesWithCount",
     {{"SLURM_JOB_NODELIST", "gpu[07-09]"}},
     "SLURM_NNODES=2 but SLURM_JOB_NODELIST='gpu[07-09]' names 3 hosts"},
    {"NoNodelist", {{"SLURM_JOB_NODELIST", ""}}, "SLURM_JOB_NODELIST (or SLURM_NODELIST)"},
    {"NoNodeCount", {{"SLURM_NNODES", ""}}, "SLURM_NNODES (or SLURM_JOB_NUM_NODES)"},
    {"NotInAStep", {{"SLURM_NODEID", ""}}, "srun --ntasks-per-node=1"},
    {"BadTasksPerNode", {{"SLURM_TASKS_PER_NODE", "1(x)"}}, "SLURM_TASKS_PER_NODE"},
    {"JobIdWithSpace", {{"SLURM_JOB_ID", "42 43"}}, "whitespace"},
};

class DetectBadSlurm : public ::testing::TestWithParam<BadEnvCase> {};

TEST_P(DetectBadSlurm, ThrowsConfigErrorNamingTheVariable) {
  const BadEnvCase& c = GetParam();
  Env env = agentOnSecondNode();
  for (const auto& [name, value] : c.changes) {
    if (value.empty()) {
      env.erase(name);
    } else {
      env[name] = value;
    }
  }
  try {
    detectSlurm(env);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(c.errorSubstring), std::string::npos)
        << "message: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Table, DetectBadSlurm, ::testing::ValuesIn(kBadEnvCases),
                         [](const auto& test) { return std::string(test.param.name); });

// --- slurmMasterPort -----------------------------------------------------------

TEST(SlurmMasterPort, NumericIdsFollowTheDocumentedRule) {
  EXPECT_EQ(slurmMasterPort("0"), 15000);
  EXPECT_EQ(slurmMasterPort("42"), 15042);
  EXPECT_EQ(slurmMasterPort("00042"), 15042);
  EXPECT_EQ(slurmMasterPort("16999"), 31999);
  EXPECT_EQ(slurmMasterPort("17000"), 15000);
  EXPECT_EQ(slurmMasterPort("123456"), 19456);  // 123456 mod 17000 = 4456
  // Longer than 64 bits: still the id modulo 17000.
  EXPECT_EQ(slurmMasterPort("123456789012345678901234567890"), 22890);
}

TEST(SlurmMasterPort, ConsecutiveJobsGetDifferentPorts) {
  std::set<std::uint16_t> ports;
  for (int id = 1'000'000; id < 1'000'000 + static_cast<int>(kSlurmPortSpan); ++id) {
    ports.insert(slurmMasterPort(std::to_string(id)));
  }
  EXPECT_EQ(ports.size(), kSlurmPortSpan);
}

TEST(SlurmMasterPort, ArrayTasksAddTheTaskId) {
  EXPECT_EQ(slurmMasterPort("1234_5"), 15000 + 1239);
  EXPECT_EQ(slurmMasterPort("1234_6"), 15000 + 1240);
  EXPECT_NE(slurmMasterPort("1234_5"), slurmMasterPort("1234_6"));
}

TEST(SlurmMasterPort, OtherIdsUseAStableHash) {
  // Pinned values: agents built from different releases must still agree.
  EXPECT_EQ(slurmMasterPort("abc"), 19931);
  EXPECT_EQ(slurmMasterPort("1234+1"), 25145);  // heterogeneous job component
  EXPECT_EQ(slurmMasterPort("job-x"), 28009);
  EXPECT_EQ(slurmMasterPort("1234_"), slurmMasterPort("1234_"));
}

TEST(SlurmMasterPort, StaysInRange) {
  for (const char* id :
       {"1", "99999", "4294967296", "1_1", "x", "1234_", "_5", "a_b", "18446744073709551616"}) {
    const std::uint16_t port = slurmMasterPort(id);
    EXPECT_GE(port, kSlurmPortBase) << id;
    EXPECT_LT(port, kSlurmPortBase + kSlurmPortSpan) << id;
    EXPECT_LT(port, 32768) << id;  // below Linux's default ephemeral range
  }
}

TEST(SlurmMasterPort, RejectsAnEmptyId) { EXPECT_THROW(slurmMasterPort(""), ConfigError); }

}  // namespace
}  // namespace ddprun
