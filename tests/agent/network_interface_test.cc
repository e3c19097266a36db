#include "ddprun/agent/rounds/network_interface.h"

#include <gtest/gtest.h>

#include "host_network.h"

namespace ddprun::agent {
namespace {

TEST(NetworkInterface, LoopbackAndNonAddressesHaveNone) {
  EXPECT_EQ(interfaceWithAddress("127.0.0.1"), std::nullopt);
  EXPECT_EQ(interfaceWithAddress("::1"), std::nullopt);
  EXPECT_EQ(interfaceWithAddress("node7"), std::nullopt);       // a name, not an address
  EXPECT_EQ(interfaceWithAddress("192.0.2.55"), std::nullopt);  // TEST-NET-1: nobody's
}

// Inside a host of a HostNetwork, with eth0 isolated and eth1 shared: each
// address maps to its own interface, IPv4 and IPv6.
TEST(NetworkInterface, FindsTheInterfaceOfEachAddressOnAHost) {
  if (const auto why = harness::HostNetwork::unavailable()) {
    GTEST_SKIP() << "no network namespaces on this machine: " << *why;
  }
  harness::HostNetwork net({.hosts = 1, .isolatedInterface = true});
  // This test binary, run again inside the host, answers one query.
  const auto result = net.runIn(0, "/proc/" + std::to_string(::getpid()) +
                                       "/exe --gtest_filter=NetworkInterface.DISABLED_Probe "
                                       "--gtest_also_run_disabled_tests 2>&1");
  EXPECT_NE(result.output.find("10.10.0.1=eth1 fd10::1=eth1 10.20.0.1=eth0"), std::string::npos)
      << result.output;
}

TEST(NetworkInterface, DISABLED_Probe) {
  std::cout << "10.10.0.1=" << interfaceWithAddress("10.10.0.1").value_or("?")
            << " fd10::1=" << interfaceWithAddress("fd10::1").value_or("?")
            << " 10.20.0.1=" << interfaceWithAddress("10.20.0.1").value_or("?") << "\n";
}

}  // namespace
}  // namespace ddprun::agent
