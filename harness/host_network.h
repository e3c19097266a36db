// HostNetwork: several "hosts" on one machine for multi-host tests, each a
// Linux network namespace with its own network stack, joined by a switch
// (netns-switch, a user-space learning switch over TAP devices) that can cut
// a host off silently and delay, jitter and drop frames.
//
//   HostNetwork net({.hosts = 3});
//   auto agent = net.start(0, {kDdprun, "--nnodes=3", ...});  // runs inside host 0
//   net.cut(2);  ...  net.restore(2);
//   net.impair(100, 20, 2);  // 100 +- 20 ms each way, 2 % of frames lost
//
// Host h has the routed interface `routedInterface()` with 10.10.0.(h+1)/24
// and fd10::(h+1)/64 (either can be left out: IPv4-only, IPv6-only). With
// `isolatedInterface`, every host also has eth0 (10.20.0.(h+1)/24,
// fd20::(h+1)/64) first, on a switch whose ports are all cut: up, addressed,
// reaching nobody -- a network the hosts do not share.
//
// Cleanup: the destructor kills every process left in the namespaces and
// deletes them; the switch dies with this process (its TAP devices with it);
// namespaces left by a test process that was killed are deleted by the next
// HostNetwork. Requires root, iproute2 and /dev/net/tun: unavailable() says
// what is missing, for the tests' skip line.
//
// Thread-safety: none; one test thread drives it.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.h"

namespace ddprun::harness {

class HostNetwork {
 public:
  struct Options {
    int hosts = 2;
    bool ipv4 = true;
    bool ipv6 = true;
    bool isolatedInterface = false;
  };

  // Why hosts cannot be made on this machine, or nullopt when they can.
  static std::optional<std::string> unavailable() {
    if (::geteuid() != 0) return "network namespaces need root (run the suite as root)";
    if (ipBinary().empty()) return "iproute2's `ip` is missing (scripts/setup installs it)";
    if (::access("/dev/net/tun", R_OK | W_OK) != 0) return "/dev/net/tun is missing";
    const std::string probe = fmt::format("ddprun-probe-{}", ::getpid());
    if (run(fmt::format("{0} netns add {1} && {0} netns del {1}", ipBinary(), probe)).code != 0) {
      return "this kernel refuses new network namespaces (`ip netns add` failed)";
    }
    return std::nullopt;
  }

  explicit HostNetwork(Options options, const std::string& switchBinary = kSwitchBinary)
      : options_(options), pid_(::getpid()), sequence_(nextId()++) {
    if (options_.hosts < 1 || options_.hosts > 9) throw std::invalid_argument("1 to 9 hosts");
    removeStaleNamespaces();
    std::vector<std::string> routed{switchBinary};
    std::vector<std::string> isolated{switchBinary};
    for (int h = 0; h < options_.hosts; ++h) {
      routed.push_back(tapName(0, h));
      isolated.push_back(tapName(1, h));
    }
    if (options_.isolatedInterface) isolated_ = startSwitch(isolated);
    switch_ = startSwitch(routed);
    std::string script;
    for (int h = 0; h < options_.hosts; ++h) {
      const std::string ns = namespaceName(h);
      script += fmt::format("{0} netns add {1} && {0} -n {1} link set lo up && ", ip(), ns);
      if (options_.isolatedInterface) script += attach(h, 1, "eth0");
      script += attach(h, 0, routedInterface());
    }
    check(script + "true");
    if (options_.isolatedInterface) {
      for (int h = 0; h < options_.hosts; ++h) command(*isolated_, fmt::format("cut {}", h));
    }
  }

  ~HostNetwork() {
    for (int h = 0; h < options_.hosts; ++h) removeNamespace(namespaceName(h));
    switch_.reset();
    isolated_.reset();
  }
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int hosts() const { return options_.hosts; }
  std::string routedInterface() const { return options_.isolatedInterface ? "eth1" : "eth0"; }
  std::string ipv4(int host) const { return fmt::format("10.10.0.{}", host + 1); }
  std::string ipv6(int host) const { return fmt::format("fd10::{}", host + 1); }
  std::string isolatedIpv4(int host) const { return fmt::format("10.20.0.{}", host + 1); }
  // The host's routed address: IPv4 where it has one, else IPv6.
  std::string address(int host) const { return options_.ipv4 ? ipv4(host) : ipv6(host); }
  // "address:port", bracketed for IPv6.
  std::string endpoint(int host, std::uint16_t port) const {
    return options_.ipv4 ? fmt::format("{}:{}", ipv4(host), port)
                         : fmt::format("[{}]:{}", ipv6(host), port);
  }
  std::string namespaceName(int host) const {
    return fmt::format("ddprun-{}-{}-h{}", pid_, sequence_, host);
  }

  // `argv` as a command that runs inside `host`.
  std::vector<std::string> inHost(int host, std::vector<std::string> argv) const {
    std::vector<std::string> wrapped = {ip(), "netns", "exec", namespaceName(host)};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return wrapped;
  }
  // Starts `argv` (absolute path first) inside `host`.
  std::unique_ptr<ChildProcess> start(int host, std::vector<std::string> argv,
                                      std::map<std::string, std::string> env = {}) const {
    return std::make_unique<ChildProcess>(inHost(host, std::move(argv)), std::move(env));
  }

  // The host's routed link goes silent both ways (nothing closed, nothing
  // reset); restore() brings it back.
  void cut(int host) { command(*switch_, fmt::format("cut {}", host)); }
  void restore(int host) { command(*switch_, fmt::format("restore {}", host)); }
  // Every frame between hosts waits delayMs +- jitterMs and is lost with
  // lossPercent chance (0, 0, 0: a clean network again).
  void impair(double delayMs, double jitterMs, double lossPercent) {
    command(*switch_, fmt::format("impair {} {} {}", delayMs, jitterMs, lossPercent));
  }

  // Every process on `host` dies at once (SIGKILL): the host crashed.
  void crash(int host) { killAll(namespaceName(host)); }

  // Runs `shellCommand` inside `host`; its exit code and output.
  struct Result {
    int code = -1;
    std::string output;
  };
  Result runIn(int host, const std::string& shellCommand) const {
    return run(fmt::format("{} netns exec {} sh -c '{}'", ip(), namespaceName(host), shellCommand));
  }
  // The pids of every process running inside `host` (`ip netns pids`).
  std::vector<std::string> processesIn(int host) const {
    std::istringstream list(run(fmt::format("{} netns pids {}", ip(), namespaceName(host))).output);
    std::vector<std::string> pids;
    for (std::string pid; list >> pid;) pids.push_back(pid);
    return pids;
  }

 private:
  inline static const std::string kSwitchBinary = std::string(DDPRUN_BIN_DIR) + "/netns-switch";

  static std::atomic<int>& nextId() {
    static std::atomic<int> id{0};
    return id;
  }
  static std::string ipBinary() {
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(path, X_OK) == 0) return path;
    }
    return "";
  }
  static std::string ip() { return ipBinary(); }

  static Result run(const std::string& shellCommand) {
    ChildProcess shell({"/bin/sh", "-c", shellCommand + " 2>&1"});
    Result result;
    result.code = shell.wait(std::chrono::seconds(30)).value_or(-1);
    result.output = shell.stdoutText();
    return result;
  }
  static void check(const std::string& shellCommand) {
    const Result result = run(shellCommand);
    if (result.code != 0) {
      throw std::runtime_error("host network setup failed: " + shellCommand + ": " + result.output);
    }
  }

  // TAP names are at most 15 bytes: "d<pid>n<sequence>_<network><host>".
  std::string tapName(int network, int host) const {
    return fmt::format("d{}n{}_{}{}", pid_, sequence_ % 100, network, host);
  }

  std::string attach(int host, int network, const std::string& name) const {
    const std::string ns = namespaceName(host);
    const int subnet = network == 0 ? 10 : 20;
    std::string s =
        fmt::format("{} link set {} netns {} name {} && ", ip(), tapName(network, host), ns, name);
    if (options_.ipv4) {
      s += fmt::format("{} -n {} addr add 10.{}.0.{}/24 dev {} && ", ip(), ns, subnet, host + 1,
                       name);
    }
    if (options_.ipv6) {
      s += fmt::format("{} -n {} addr add fd{}::{}/64 dev {} nodad && ", ip(), ns, subnet, host + 1,
                       name);
    }
    return s + fmt::format("{} -n {} link set {} up && ", ip(), ns, name);
  }

  static std::unique_ptr<ChildProcess> startSwitch(const std::vector<std::string>& argv) {
    auto process = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{}, true);
    const auto line = process->readStdoutLine(std::chrono::seconds(10));
    if (line != "ready") {
      throw std::runtime_error("netns-switch did not start: " + process->stderrText());
    }
    return process;
  }
  static void command(ChildProcess& target, const std::string& line) {
    target.writeStdin(line + "\n");
    const auto reply = target.readStdoutLine(std::chrono::seconds(10));
    if (reply != "ok") {
      throw std::runtime_error("netns-switch refused '" + line + "': " + reply.value_or("(none)"));
    }
  }

  static void killAll(const std::string& ns) {
    run(fmt::format("pids=$({} netns pids {}); [ -z \"$pids\" ] || kill -KILL $pids", ip(), ns));
  }
  static void removeNamespace(const std::string& ns) {
    killAll(ns);
    run(fmt::format("{} netns del {}", ip(), ns));
  }
  // Namespaces of test processes that no longer exist (killed mid-test).
  static void removeStaleNamespaces() {
    std::istringstream names(run(ip() + " netns list").output);
    const std::regex ours(R"(^(ddprun-(\d+)-\d+-h\d+))");
    for (std::string line; std::getline(names, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, ours)) continue;
      if (std::filesystem::exists("/proc/" + m[2].str())) continue;
      removeNamespace(m[1].str());
    }
  }

  Options options_;
  int pid_;
  int sequence_;
  std::unique_ptr<ChildProcess> switch_;
  std::unique_ptr<ChildProcess> isolated_;
};

}  // namespace ddprun::harness
