// EtcdOptions: how ddprun reaches an etcd cluster (--rdzv_backend=etcd,
// docs/multinode.md): the members' client endpoints, TLS, and the key
// prefix under which rendezvous live.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddprun::rendezvous {

struct EtcdOptions {
  // "host:port" of each member; requests fail over to the next one.
  std::vector<std::string> endpoints;
  // https (rdzv_conf protocol=https): the members' certificates are checked
  // against caFile (else the system's CAs); certFile and keyFile are this
  // client's certificate when etcd asks for one (--client-cert-auth).
  bool tls = false;
  std::string caFile;
  std::string certFile;
  std::string keyFile;
  // Every rendezvous lives under <prefix>/<rdzv_id>/ (rdzv_conf etcd_prefix).
  std::string prefix = "/ddprun";
  // One request to one member; past it the next member is tried.
  std::chrono::milliseconds requestTimeout{std::chrono::seconds(5)};
  // A member that goes silent (its host cut off) fails the connection, a
  // watch's included, after about this long (TCP keep-alive and user
  // timeout, common/tcp_liveness.h); the client then moves to the next
  // member. Zero: the kernel's defaults.
  std::chrono::milliseconds silenceLimit{0};
};

}  // namespace ddprun::rendezvous
