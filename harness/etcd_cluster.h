// EtcdCluster: a real etcd cluster (Debian's etcd-server, installed by
// scripts/setup) of N members on loopback, for the tests of
// --rdzv_backend=etcd. Each member listens on its own free ports and keeps
// its data in a fresh directory (on /dev/shm when there is one: etcd syncs
// every write). The constructor returns once the cluster has a leader and
// accepts writes; the destructor kills every member and removes the data.
// With EtcdHosts, member i runs inside host i of a HostNetwork instead,
// listening on that host's address (ports 2379 and 2380).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "ddprun/rendezvous/etcd_client.h"
#include "unused_port.h"

namespace ddprun::harness {

// Certificates for an etcd that speaks TLS and checks client certificates
// (--client-cert-auth): a CA, the members' certificate for 127.0.0.1 and a
// client's, made with the openssl command in `dir`.
struct EtcdTls {
  std::filesystem::path dir;
  std::string ca() const { return (dir / "ca.pem").string(); }
  std::string serverCert() const { return (dir / "server.pem").string(); }
  std::string serverKey() const { return (dir / "server.key").string(); }
  std::string clientCert() const { return (dir / "client.pem").string(); }
  std::string clientKey() const { return (dir / "client.key").string(); }

  static EtcdTls make(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    const std::string script = fmt::format(
        "set -e; cd {}; "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
        "-subj /CN=ddprun-test-ca; "
        "for who in server client; do "
        "openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who; "
        "printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > "
        "$who.ext; "
        "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem "
        "-days 2 -extfile $who.ext; done",
        dir.string());
    const std::string command = "(" + script + ") > " + (dir / "openssl.log").string() + " 2>&1";
    if (std::system(command.c_str()) != 0) {
      throw std::runtime_error("openssl could not make the test certificates (see " +
                               (dir / "openssl.log").string() + ")");
    }
    return EtcdTls{dir};
  }
};

// Raft timing: the tests' fast failover (heartbeat 50 ms, election 500 ms),
// or etcd's defaults (100 ms, 1 s), which a benchmark loading two cores
// with thousands of clients needs to keep its leader.
struct EtcdTiming {
  int heartbeatMs = 50;
  int electionMs = 500;
};

// Members on separate hosts: member i listens on addresses[i] and runs the
// command inHost(i, argv) (HostNetwork::inHost).
struct EtcdHosts {
  std::vector<std::string> addresses;
  std::function<std::vector<std::string>(int, std::vector<std::string>)> inHost;
};

class EtcdCluster {
 public:
  explicit EtcdCluster(int members = 3, std::optional<EtcdTls> tls = std::nullopt,
                       EtcdTiming timing = EtcdTiming{},
                       std::optional<EtcdHosts> hosts = std::nullopt)
      : tls_(std::move(tls)), hosts_(std::move(hosts)) {
    const std::filesystem::path shm = "/dev/shm";
    dir_ = (std::filesystem::is_directory(shm) ? shm : std::filesystem::temp_directory_path()) /
           fmt::format("ddprun-etcd-{}-{}", ::getpid(), counter()++);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const auto ports =
        hosts_ ? std::vector<std::uint16_t>{} : freePorts(static_cast<std::size_t>(2 * members));
    std::string initial;
    for (int i = 0; i < members; ++i) {
      addresses_.push_back(hosts_ ? hosts_->addresses.at(i) : "127.0.0.1");
      clientPorts_.push_back(hosts_ ? 2379 : ports[2 * i]);
      peerPorts_.push_back(hosts_ ? 2380 : ports[2 * i + 1]);
      initial +=
          fmt::format("{}m{}=http://{}:{}", i == 0 ? "" : ",", i, addresses_[i], peerPorts_[i]);
    }
    const std::string scheme = tls_ ? "https" : "http";
    const std::string tlsFlags =
        tls_ ? fmt::format(" --cert-file {} --key-file {} --trusted-ca-file {} --client-cert-auth",
                           tls_->serverCert(), tls_->serverKey(), tls_->ca())
             : "";
    for (int i = 0; i < members; ++i) {
      const std::string command = fmt::format(
          "exec etcd --name m{0} --data-dir {1}/m{0} --listen-client-urls {6}://{10}:{2} "
          "--advertise-client-urls {6}://{10}:{2} --listen-peer-urls http://{10}:{3} "
          "--initial-advertise-peer-urls http://{10}:{3} --initial-cluster {4} "
          "--initial-cluster-state new --initial-cluster-token ddprun-test-{5} "
          "--heartbeat-interval {8} --election-timeout {9}{7} > {1}/m{0}.log 2>&1",
          i, dir_.string(), clientPorts_[i], peerPorts_[i], initial, dir_.filename().string(),
          scheme, tlsFlags, timing.heartbeatMs, timing.electionMs, addresses_[i]);
      std::vector<std::string> argv = {"/bin/sh", "-c", command};
      if (hosts_) argv = hosts_->inHost(i, argv);
      members_.push_back(std::make_unique<ChildProcess>(argv));
    }
    waitUntilWritable(std::chrono::seconds(30));
  }

  ~EtcdCluster() {
    members_.clear();  // SIGKILL and reap
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  std::string endpoint(int i) const { return fmt::format("{}:{}", addresses_[i], clientPorts_[i]); }
  // Every member: "127.0.0.1:p0,127.0.0.1:p1,...".
  std::string endpoints() const {
    std::string list;
    for (std::size_t i = 0; i < clientPorts_.size(); ++i) {
      list += (i == 0 ? "" : ",") + endpoint(static_cast<int>(i));
    }
    return list;
  }
  rendezvous::EtcdOptions options() const {
    rendezvous::EtcdOptions o;
    if (tls_) {
      o.tls = true;
      o.caFile = tls_->ca();
      o.certFile = tls_->clientCert();
      o.keyFile = tls_->clientKey();
    }
    for (std::size_t i = 0; i < clientPorts_.size(); ++i)
      o.endpoints.push_back(endpoint(static_cast<int>(i)));
    return o;
  }
  void kill(int i) {
    members_[i]->signal(SIGKILL);
    members_[i]->wait(std::chrono::seconds(10));
  }
  std::string log(int i) const { return (dir_ / fmt::format("m{}.log", i)).string(); }
  // The members' processes (each `sh -c` execs etcd, so these are etcd's).
  std::vector<pid_t> pids() const {
    std::vector<pid_t> all;
    for (const auto& m : members_) all.push_back(m->pid());
    return all;
  }
  // Returns once a put commits (the cluster has a leader); throws after `limit`.
  void waitUntilWritable(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    if (hosts_) {
      // Asked from inside member 0's host (this process is on no host's
      // network). etcdctl's dial waits until a member listens, its command
      // until the cluster commits (a put before the first leader fails and
      // is asked again).
      while (std::chrono::steady_clock::now() < deadline) {
        ChildProcess put(
            hosts_->inHost(0, {"/usr/bin/etcdctl", "--endpoints", endpoints(), "--dial-timeout=10s",
                               "--command-timeout=10s", "put", "/ddprun-test/ready", "1"}));
        if (put.wait(std::chrono::seconds(30)) == 0) return;
      }
      throw std::runtime_error("the etcd cluster on the test hosts did not start");
    }
    auto o = options();
    o.requestTimeout = std::chrono::seconds(2);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        rendezvous::EtcdClient client(o);
        client.put("/ddprun-test/ready", "1");
        return;
      } catch (const std::exception& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("the etcd cluster did not start: " + last);
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }

  std::optional<EtcdTls> tls_;
  std::optional<EtcdHosts> hosts_;
  std::filesystem::path dir_;
  std::vector<std::string> addresses_;
  std::vector<std::uint16_t> clientPorts_;
  std::vector<std::uint16_t> peerPorts_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
};

}  // namespace ddprun::harness
