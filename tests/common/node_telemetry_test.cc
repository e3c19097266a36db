#include "ddprun/common/node_telemetry.h"

#include <gtest/gtest.h>

namespace ddprun::telemetry {
namespace {

DowntimeCounters someCounters() {
  DowntimeCounters c;
  c.incidents = 2;
  c.lostMs = 4100;
  c.trainingMs = 9000;
  c.elapsedMs = 12000;
  c.startMs = 2500;
  c.trained = true;
  c.phases[index(Phase::kDetect)].add(3);
  c.phases[index(Phase::kDetect)].add(700);
  c.phases[index(Phase::kFirstStep)].add(3900);
  return c;
}

// What every reader of a node's published counters relies on: the agent's
// text decodes to what it encoded, whatever the readers' version.
TEST(NodeTelemetry, CountersRoundTrip) {
  const DowntimeCounters c = someCounters();
  const auto decoded = decodeDowntimeCounters(encodeCounters(c));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(*decoded, c);
  EXPECT_DOUBLE_EQ(*decoded->goodput(), 0.75);
}

// The encoding itself is pinned: agents and stores of different versions
// read each other's texts.
TEST(NodeTelemetry, TheCountersTextIsPinned) {
  DowntimeCounters c;
  c.incidents = 1;
  c.lostMs = 2100;
  c.trained = true;
  c.phases[index(Phase::kStop)].add(120);
  const std::string text = encodeCounters(c);
  EXPECT_TRUE(text.starts_with(
      "incidents=1 lost_ms=2100 training_ms=0 elapsed_ms=0 start_ms=0 trained=1 detect_le_100=0 "))
      << text;
  EXPECT_NE(text.find(" stop_le_100=0 stop_le_500=1 "), std::string::npos) << text;
  EXPECT_NE(text.find(" stop_le_inf=1 stop_count=1 stop_sum_ms=120 "), std::string::npos) << text;
  EXPECT_NE(text.find(" first_step_le_600000=0 first_step_le_inf=0"), std::string::npos) << text;
  for (Phase phase : kPhases) {
    EXPECT_NE(text.find(std::string(" ") + phaseName(phase) + "_count="), std::string::npos)
        << phaseName(phase);
  }
}

TEST(NodeTelemetry, NoTextIsNoCountersAndOldOrForeignWordsAreSkipped) {
  EXPECT_FALSE(decodeDowntimeCounters(""));
  // An agent from before "trained" was published: its goodput is known.
  const auto old = decodeDowntimeCounters("incidents=1 lost_ms=10 elapsed_ms=100 training_ms=50");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->trained);
  EXPECT_DOUBLE_EQ(*old->goodput(), 0.5);
  // No step reported: no goodput, not 0.
  EXPECT_FALSE(decodeDowntimeCounters("incidents=0 elapsed_ms=100 trained=0")->goodput());
  EXPECT_EQ(parseCounters("a=1 B=2 c=-3 d= =4 e=99999999999999999999 f_2=5 g=6x"),
            (std::vector<std::pair<std::string, std::uint64_t>>{{"a", 1}, {"f_2", 5}}));
}

TEST(NodeTelemetry, IncidentRecordsRoundTripThroughTheEventLogsMetadata) {
  IncidentRecord r;
  r.number = 3;
  r.kind = "hang";
  r.cause = "worker rank 1 (pid 42) is hung";
  r.failedAttempt = 2;
  r.startup = true;
  r.complete = true;
  r.assumed = false;
  r.beganMs = 1796383893597;
  r.lostMs = 5600;
  r.phaseMs[index(Phase::kDetect)] = 5000;
  r.phaseMs[index(Phase::kStop)] = 0;  // reached, in no time: not absent
  const Metadata m = toMetadata(r);
  EXPECT_EQ(m.at("lost_ms"), "5600");
  EXPECT_EQ(m.at("detect_ms"), "5000");
  EXPECT_FALSE(m.contains("spawn_ms"));  // never reached
  EXPECT_EQ(incidentFromMetadata(m), r);
}

TEST(NodeTelemetry, DowntimeRecordsRoundTripThroughTheEventLogsMetadata) {
  DowntimeRecord r;
  r.incidents = 1;
  r.lostMs = 5600;
  r.trainingMs = 6000;
  r.elapsedMs = 12000;
  r.startMs = 400;
  r.goodput = 0.5;
  r.phaseMs[index(Phase::kRendezvous)] = 30;
  EXPECT_EQ(toMetadata(r).at("goodput"), "0.5000");
  EXPECT_EQ(downtimeFromMetadata(toMetadata(r)), r);
  r.goodput = std::nullopt;  // no attempt trained
  EXPECT_EQ(toMetadata(r).at("goodput"), "");
  EXPECT_EQ(downtimeFromMetadata(toMetadata(r)), r);
}

TEST(NodeTelemetry, RelayCountersRoundTripAndArePinned) {
  const RelayTotals relay{8, 48, 9, 30, 9, 2100};
  EXPECT_EQ(encodeCounters(relay),
            "connections=8 requests=48 upstream_requests=9 shared_reads=30 adds_combined=9 "
            "bytes_saved=2100");
  EXPECT_EQ(decodeRelayCounters(encodeCounters(relay)), relay);
  EXPECT_FALSE(decodeRelayCounters(""));
}

// The line ddprun::worker writes; the Python hook writes the same keys.
TEST(NodeTelemetry, TheProgressLineNamesItsEvent) {
  EXPECT_EQ(progressLine(42, ProgressEvent::kStep, 7),
            "{\"pid\": 42, \"event\": \"step\", \"step\": 7}\n");
  for (ProgressEvent event :
       {ProgressEvent::kProcessGroup, ProgressEvent::kStep, ProgressEvent::kImports}) {
    EXPECT_EQ(progressEventNamed(progressEventName(event)), event);
  }
  EXPECT_FALSE(progressEventNamed("stepped"));
}

TEST(NodeTelemetry, PhasesHaveOneNameForMachinesAndOneForPeople) {
  EXPECT_STREQ(phaseName(Phase::kProcessGroup), "process_group");
  EXPECT_EQ(phaseWords(Phase::kFirstStep), "first step");
}

}  // namespace
}  // namespace ddprun::telemetry
