// LibTorch's own C++ c10d::TCPStore client (Debian's libtorch-dev 1.13.1)
// against ddprun-rendezvous: the 1.13 dialect from the C++ side.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gtest/gtest.h>

#include <thread>

#include "child_process.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

class C10dClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<harness::ChildProcess>(
        std::vector<std::string>{std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous", "--host",
                                 "127.0.0.1", "--port", "0", "--trusted-address", "127.0.0.1"},
        std::map<std::string, std::string>{{"DDPRUN_TOKEN", "c10d-test"}});
    const auto line = daemon_->readStdoutLine(10s);
    ASSERT_TRUE(line);
    port_ = static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  }
  std::unique_ptr<c10d::TCPStore> client() {
    c10d::TCPStoreOptions options;
    options.port = port_;
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = std::chrono::milliseconds(5000);
    return std::make_unique<c10d::TCPStore>("127.0.0.1", options);
  }
  std::unique_ptr<harness::ChildProcess> daemon_;
  std::uint16_t port_ = 0;
};

TEST_F(C10dClientTest, EveryOperationOf113) {
  auto s = client();
  s->set("k", bytes("v"));
  EXPECT_EQ(text(s->get("k")), "v");
  EXPECT_EQ(s->add("n", 3), 3);
  EXPECT_EQ(s->add("n", -1), 2);
  EXPECT_EQ(text(s->compareSet("k", bytes("v"), bytes("w"))), "w");
  EXPECT_EQ(text(s->compareSet("k", bytes("x"), bytes("y"))), "w");
  EXPECT_TRUE(s->check({"k", "n"}));
  EXPECT_FALSE(s->check({"k", "absent"}));
  s->wait({"k", "n"});
  EXPECT_EQ(s->getNumKeys(), 2);
  EXPECT_TRUE(s->deleteKey("k"));
  EXPECT_FALSE(s->deleteKey("k"));
}

TEST_F(C10dClientTest, WaitTimesOutAndTheClientGoesOn) {
  auto s = client();
  EXPECT_ANY_THROW(s->wait({"never"}, std::chrono::milliseconds(200)));
  s->set("after", bytes("1"));
  EXPECT_EQ(text(s->get("after")), "1");
}

TEST_F(C10dClientTest, WaitIsWokenByAnotherClient) {
  auto waiter = client();
  auto writer = client();
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    writer->set("late", bytes("here"));
  });
  EXPECT_EQ(text(waiter->get("late")), "here");
  t.join();
}

}  // namespace
}  // namespace ddprun
