#include "ddprun/rendezvous/store_state.h"

#include <gtest/gtest.h>

namespace ddprun::rendezvous {
namespace {

// The size an entry is charged: its text plus the per-key overhead.
std::size_t entry(std::size_t keyAndValueBytes) { return keyAndValueBytes + kKeyOverheadBytes; }

// Registers a waiter and returns its id (nullopt: the keys were all there).
std::optional<StoreState::WaiterId> waitFor(StoreState& state, const std::vector<std::string>& keys,
                                            std::function<void()> onReady) {
  std::optional<StoreState::WaiterId> id;
  EXPECT_EQ(state.addWaiter(keys, std::move(onReady), id), StoreResult::kOk);
  return id;
}

TEST(StoreState, SetFindDeleteAndCount) {
  StoreState state;
  EXPECT_EQ(state.find("k"), nullptr);
  EXPECT_EQ(state.set("k", "v"), StoreResult::kOk);
  ASSERT_NE(state.find("k"), nullptr);
  EXPECT_EQ(*state.find("k"), "v");
  EXPECT_EQ(state.set("k", "w"), StoreResult::kOk);
  EXPECT_EQ(*state.find("k"), "w");
  EXPECT_EQ(state.numKeys(), 1);
  EXPECT_TRUE(state.deleteKey("k"));
  EXPECT_FALSE(state.deleteKey("k"));
  EXPECT_EQ(state.numKeys(), 0);
  EXPECT_EQ(state.totalBytes(), 0u);
}

TEST(StoreState, AddCountsFromZeroAndRefusesNonIntegers) {
  StoreState state;
  std::int64_t result = 0;
  EXPECT_EQ(state.add("c", 5, result), StoreResult::kOk);
  EXPECT_EQ(result, 5);
  EXPECT_EQ(state.add("c", -7, result), StoreResult::kOk);
  EXPECT_EQ(result, -2);
  EXPECT_EQ(*state.find("c"), "-2");  // stored as decimal text, like TCPStore
  state.set("text", "abc");
  EXPECT_EQ(state.add("text", 1, result), StoreResult::kNotInteger);
  EXPECT_EQ(*state.find("text"), "abc");
  state.set("empty", "");
  EXPECT_EQ(state.add("empty", 1, result), StoreResult::kNotInteger);
  state.set("max", std::to_string(INT64_MAX));
  EXPECT_EQ(state.add("max", 1, result), StoreResult::kNotInteger);
  EXPECT_EQ(state.add("max", 0, result), StoreResult::kOk);
}

TEST(StoreState, AppendCreatesThenConcatenates) {
  StoreState state;
  state.append("log", "a");
  state.append("log", "b");
  EXPECT_EQ(*state.find("log"), "ab");
  EXPECT_EQ(state.totalBytes(), entry(5));
}

// The COMPARE_SET truth table (docs/protocol.md), matching TCPStore.
TEST(StoreState, CompareSetTruthTable) {
  struct Row {
    const char* name;
    std::optional<std::string> before;
    std::string expected;
    std::string desired;
    std::string reply;
    std::optional<std::string> after;
  };
  const Row rows[] = {
      {"missing, expected empty: set", std::nullopt, "", "new", "new", "new"},
      {"missing, expected non-empty: unchanged", std::nullopt, "x", "new", "x", std::nullopt},
      {"present and equal: replaced", "old", "old", "new", "new", "new"},
      {"present and different: unchanged", "cur", "old", "new", "cur", "cur"},
      {"present empty, expected empty: replaced", "", "", "new", "new", "new"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    StoreState state;
    if (row.before) state.set("k", *row.before);
    std::string reply;
    EXPECT_EQ(state.compareSet("k", row.expected, row.desired, reply), StoreResult::kOk);
    EXPECT_EQ(reply, row.reply);
    const std::string* after = state.find("k");
    EXPECT_EQ(after != nullptr, row.after.has_value());
    if (after && row.after) {
      EXPECT_EQ(*after, *row.after);
    }
  }
}

TEST(StoreState, CheckNeedsEveryKey) {
  StoreState state;
  const std::vector<std::string> keys = {"a", "b"};
  EXPECT_FALSE(state.check(keys));
  state.set("a", "1");
  EXPECT_FALSE(state.check(keys));
  state.set("b", "1");
  EXPECT_TRUE(state.check(keys));
  EXPECT_TRUE(state.check({}));
}

TEST(StoreState, WaiterOnPresentKeysIsNotRegistered) {
  StoreState state;
  state.set("a", "1");
  const std::vector<std::string> keys = {"a"};
  EXPECT_FALSE(waitFor(state, keys, [] { FAIL(); }).has_value());
  EXPECT_EQ(state.numWaiters(), 0u);
}

// Each kind of write that creates a key wakes a waiter.
TEST(StoreState, WaitersAreWokenByEveryCreatingWrite) {
  using Write = std::function<void(StoreState&)>;
  const std::vector<std::pair<const char*, Write>> writes = {
      {"set", [](StoreState& s) { s.set("k", "v"); }},
      {"append", [](StoreState& s) { s.append("k", "v"); }},
      {"add",
       [](StoreState& s) {
         std::int64_t r;
         s.add("k", 1, r);
       }},
      {"compareSet",
       [](StoreState& s) {
         std::string r;
         s.compareSet("k", "", "v", r);
       }},
      {"multiSet",
       [](StoreState& s) {
         std::vector<std::string> keys = {"other", "k"};
         std::vector<std::string> values = {"1", "2"};
         s.multiSet(keys, values);
       }},
  };
  for (const auto& [name, write] : writes) {
    SCOPED_TRACE(name);
    StoreState state;
    int woken = 0;
    const std::vector<std::string> keys = {"k"};
    ASSERT_TRUE(waitFor(state, keys, [&] { ++woken; }).has_value());
    EXPECT_EQ(woken, 0);
    write(state);
    EXPECT_EQ(woken, 1);
    EXPECT_EQ(state.numWaiters(), 0u);
    state.set("k", "again");  // overwriting does not wake anyone twice
    EXPECT_EQ(woken, 1);
  }
}

TEST(StoreState, WaiterNeedsAllItsKeys) {
  StoreState state;
  int woken = 0;
  const std::vector<std::string> keys = {"a", "b", "a"};  // duplicates are fine
  ASSERT_TRUE(waitFor(state, keys, [&] { ++woken; }).has_value());
  state.set("a", "1");
  EXPECT_EQ(woken, 0);
  state.set("b", "1");
  EXPECT_EQ(woken, 1);
}

TEST(StoreState, KeyDeletedBeforeTheLastArrivesKeepsWaiting) {
  StoreState state;
  int woken = 0;
  const std::vector<std::string> keys = {"a", "b"};
  ASSERT_TRUE(waitFor(state, keys, [&] { ++woken; }).has_value());
  state.set("a", "1");
  state.deleteKey("a");
  state.set("b", "1");
  EXPECT_EQ(woken, 0);  // "a" is gone again
  state.set("a", "2");
  EXPECT_EQ(woken, 1);
}

TEST(StoreState, RemovedWaiterNeverFires) {
  StoreState state;
  const std::vector<std::string> keys = {"k"};
  auto id = waitFor(state, keys, [] { FAIL(); });
  ASSERT_TRUE(id.has_value());
  state.removeWaiter(*id);
  state.removeWaiter(*id);  // twice is harmless
  state.set("k", "v");
  EXPECT_EQ(state.numWaiters(), 0u);
}

TEST(StoreState, ManyWaitersOnOneKeyAllWake) {
  StoreState state;
  int woken = 0;
  const std::vector<std::string> keys = {"go"};
  for (int i = 0; i < 1000; ++i) waitFor(state, keys, [&] { ++woken; });
  state.set("go", "1");
  EXPECT_EQ(woken, 1000);
}

TEST(StoreState, SizeLimitRefusesWritesWithoutChangingState) {
  StoreState state({.maxTotalBytes = entry(10), .maxValueBytes = 1024});
  EXPECT_EQ(state.set("k", "12345678"), StoreResult::kOk);  // 9 bytes + overhead
  EXPECT_EQ(state.set("k2", "123"), StoreResult::kFull);
  EXPECT_EQ(state.find("k2"), nullptr);
  EXPECT_EQ(state.append("k", "12"), StoreResult::kFull);
  EXPECT_EQ(*state.find("k"), "12345678");
  EXPECT_EQ(state.set("k", "123456789"), StoreResult::kOk);  // replacing frees the old value
  std::vector<std::string> keys = {"x", "y"};
  std::vector<std::string> values = {"1", "2"};
  EXPECT_EQ(state.multiSet(keys, values), StoreResult::kFull);
  EXPECT_EQ(state.find("x"), nullptr);  // all or nothing
}

// Many tiny keys cost their overhead: a flood of empty keys fills the store
// at maxTotalBytes / kKeyOverheadBytes keys, not never.
TEST(StoreState, EmptyKeysAndValuesStillCountTheirOverhead) {
  StoreState state({.maxTotalBytes = 100 * kKeyOverheadBytes, .maxValueBytes = 1024});
  int stored = 0;
  while (state.set(std::to_string(stored), "") == StoreResult::kOk) ++stored;
  EXPECT_LE(stored, 100);
  EXPECT_GE(stored, 50);
  EXPECT_LE(state.totalBytes(), 100 * kKeyOverheadBytes);
}

TEST(StoreState, AppendStopsAtTheLargestValue) {
  StoreState state({.maxTotalBytes = 1 << 20, .maxValueBytes = 10});
  EXPECT_EQ(state.append("k", "12345678"), StoreResult::kOk);
  EXPECT_EQ(state.append("k", "90"), StoreResult::kOk);  // exactly 10
  EXPECT_EQ(state.append("k", "x"), StoreResult::kValueTooLarge);
  EXPECT_EQ(*state.find("k"), "1234567890");
  EXPECT_EQ(state.append("new", std::string(11, 'v')), StoreResult::kValueTooLarge);
  EXPECT_EQ(state.find("new"), nullptr);
}

// Waiters and their keys are charged while they wait, and refused when the
// store is full, so a client cannot hold unbounded memory with WAITs.
TEST(StoreState, WaitersAreChargedAndRefusedWhenFull) {
  StoreState state({.maxTotalBytes = 4096, .maxValueBytes = 1024});
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back("key" + std::to_string(i));
  std::optional<StoreState::WaiterId> id;
  ASSERT_EQ(state.addWaiter(
                keys, [] {}, id),
            StoreResult::kOk);
  ASSERT_TRUE(id);
  const std::size_t charged = state.totalBytes();
  EXPECT_GE(charged, kWaiterOverheadBytes + 10 * kKeyOverheadBytes);
  std::vector<std::string> many;
  for (int i = 0; i < 100; ++i) many.push_back("other" + std::to_string(i));
  std::optional<StoreState::WaiterId> refused;
  EXPECT_EQ(state.addWaiter(
                many, [] {}, refused),
            StoreResult::kFull);
  EXPECT_FALSE(refused);
  EXPECT_EQ(state.totalBytes(), charged);
  state.removeWaiter(*id);
  EXPECT_EQ(state.totalBytes(), 0u);
  // A waiter that fires gives its charge back too.
  const std::vector<std::string> one = {"k"};
  ASSERT_TRUE(waitFor(state, one, [] {}));
  state.set("k", "v");
  EXPECT_EQ(state.totalBytes(), entry(2));
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST(StoreState, MultiSetWithARepeatedKeyCountsItsSizeOnce) {
  StoreState state({.maxTotalBytes = 1000, .maxValueBytes = 1024});
  state.set("k", std::string(10, 'v'));
  std::vector<std::string> keys = {"k", "k"};
  std::vector<std::string> values = {"x", "y"};
  EXPECT_EQ(state.multiSet(keys, values), StoreResult::kOk);
  EXPECT_EQ(*state.find("k"), "y");
  EXPECT_EQ(state.totalBytes(), entry(2));
}

// Queues (PyTorch 2.8+'s queue_push/pop/len), as its libuv server has them.
TEST(StoreState, QueuesAreFifoBesideTheKeys) {
  StoreState state;
  std::string value;
  EXPECT_EQ(state.queueLen("q"), 0);
  EXPECT_EQ(state.queuePop("q", value), 0);  // empty: nothing taken, no wait
  EXPECT_EQ(state.queuePush("q", "1"), StoreResult::kOk);
  EXPECT_EQ(state.queuePush("q", "2"), StoreResult::kOk);
  EXPECT_EQ(state.queueLen("q"), 2);
  // A queue is not a key: not found, counted, listed or deleted as one.
  EXPECT_EQ(state.find("q"), nullptr);
  EXPECT_EQ(state.numKeys(), 0);
  EXPECT_TRUE(state.keys().empty());
  EXPECT_FALSE(state.deleteKey("q"));
  EXPECT_EQ(state.queuePop("q", value), 2);  // the length before the pop
  EXPECT_EQ(value, "1");
  EXPECT_EQ(state.queuePop("q", value), 1);
  EXPECT_EQ(value, "2");
  EXPECT_EQ(state.queuePop("q", value), 0);
  EXPECT_EQ(state.totalBytes(), 0u);  // a drained queue holds nothing
}

TEST(StoreState, ANonEmptyQueueIsPresentForCheckAndWait) {
  StoreState state;
  std::string value;
  EXPECT_FALSE(state.check(std::vector<std::string>{"q"}));
  state.queuePush("q", "x");
  EXPECT_TRUE(state.check(std::vector<std::string>{"q"}));
  EXPECT_FALSE(waitFor(state, {"q"}, [] {}).has_value());  // answered at once
  state.queuePop("q", value);
  EXPECT_FALSE(state.check(std::vector<std::string>{"q"}));
}

TEST(StoreState, APushWakesOneWaiterTheOldestWhereASetWakesAll) {
  StoreState state;
  std::vector<int> woken;
  auto first = waitFor(state, {"q"}, [&] { woken.push_back(1); });
  auto second = waitFor(state, {"q"}, [&] { woken.push_back(2); });
  ASSERT_TRUE(first && second);
  state.queuePush("q", "a");
  EXPECT_EQ(woken, std::vector<int>({1}));
  std::string value;
  state.queuePop("q", value);  // the woken client pops
  state.queuePush("q", "b");
  EXPECT_EQ(woken, std::vector<int>({1, 2}));
  EXPECT_EQ(state.numWaiters(), 0u);
  state.queuePop("q", value);
  // A write of the name wakes every waiter, as for any key.
  waitFor(state, {"q"}, [&] { woken.push_back(3); });
  waitFor(state, {"q"}, [&] { woken.push_back(4); });
  state.set("q", "v");
  EXPECT_EQ(woken, std::vector<int>({1, 2, 3, 4}));
}

TEST(StoreState, AWaiterOnAQueueAndAKeyNeedsBoth) {
  StoreState state;
  bool woken = false;
  ASSERT_TRUE(waitFor(state, {"q", "k"}, [&] { woken = true; }).has_value());
  state.queuePush("q", "a");
  EXPECT_FALSE(woken);
  state.set("k", "v");
  EXPECT_TRUE(woken);
}

TEST(StoreState, QueuedValuesAreChargedAndRefusedWhenFull) {
  StoreState state({.maxTotalBytes = entry(1) + 10 + kQueueItemOverheadBytes, .maxValueBytes = 64});
  EXPECT_EQ(state.queuePush("q", std::string(10, 'x')), StoreResult::kOk);
  EXPECT_EQ(state.totalBytes(), entry(1) + 10 + kQueueItemOverheadBytes);
  EXPECT_EQ(state.queuePush("q", "y"), StoreResult::kFull);
  EXPECT_EQ(state.queueLen("q"), 1);
  std::string value;
  state.queuePop("q", value);
  EXPECT_EQ(state.totalBytes(), 0u);
  EXPECT_EQ(state.queuePush("q", std::string(65, 'x')), StoreResult::kValueTooLarge);
}

// BARRIER (PyTorch 2.11+): a count at the key; the arrival that reaches the
// world size wakes the others.
TEST(StoreState, ABarrierWakesEveryArrivalWhenTheLastComes) {
  StoreState state;
  int woken = 0;
  std::optional<StoreState::WaiterId> id;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(state.barrier(
                  "b", 3, [&] { ++woken; }, id),
              StoreResult::kOk);
    EXPECT_TRUE(id.has_value());
  }
  EXPECT_EQ(*state.find("b"), "2");
  EXPECT_EQ(woken, 0);
  EXPECT_EQ(state.barrier(
                "b", 3, [&] { ++woken; }, id),
            StoreResult::kOk);
  EXPECT_FALSE(id.has_value());  // the last arrival is answered at once
  EXPECT_EQ(woken, 2);
  EXPECT_EQ(state.numWaiters(), 0u);
  // As in PyTorch, the key is spent: a later arrival passes at once.
  EXPECT_EQ(state.barrier(
                "b", 3, [] {}, id),
            StoreResult::kOk);
  EXPECT_FALSE(id.has_value());
  EXPECT_EQ(*state.find("b"), "4");
}

TEST(StoreState, ACancelledBarrierArrivalStillCounts) {
  StoreState state;
  std::optional<StoreState::WaiterId> id;
  state.barrier(
      "b", 2, [] { FAIL() << "a removed waiter fired"; }, id);
  ASSERT_TRUE(id.has_value());
  state.removeWaiter(*id);
  bool woken = false;
  EXPECT_EQ(state.barrier(
                "b", 2, [&] { woken = true; }, id),
            StoreResult::kOk);
  EXPECT_FALSE(id.has_value());
  EXPECT_EQ(state.totalBytes(), entry(2));
}

TEST(StoreState, ABarrierOnAWaitedKeyWakesTheWaitOnlyWhenItCompletes) {
  StoreState state;
  bool waited = false;
  ASSERT_TRUE(waitFor(state, {"b"}, [&] { waited = true; }).has_value());
  std::optional<StoreState::WaiterId> id;
  state.barrier(
      "b", 2, [] {}, id);
  EXPECT_FALSE(waited);  // the first arrival stores the count silently
  state.barrier(
      "b", 2, [] {}, id);
  EXPECT_TRUE(waited);
}

TEST(StoreState, ABarrierRefusesAKeyThatHoldsText) {
  StoreState state;
  state.set("b", "text");
  std::optional<StoreState::WaiterId> id;
  EXPECT_EQ(state.barrier(
                "b", 2, [] {}, id),
            StoreResult::kNotInteger);
  EXPECT_EQ(*state.find("b"), "text");
  EXPECT_EQ(state.numWaiters(), 0u);
}

}  // namespace
}  // namespace ddprun::rendezvous
