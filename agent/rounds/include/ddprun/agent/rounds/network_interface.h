// The network interface a node's address belongs to, for pinning the
// workers' Gloo and NCCL sockets to the network the job's hosts share.
//
// Why: PyTorch's Gloo binds to whatever this host's name resolves to, which
// on many machines (and in every container or namespace sharing /etc/hosts)
// is 127.0.0.1: peers on other hosts are then told to connect to their own
// loopback. NCCL takes the first interface that is not loopback or docker,
// on a host with several networks often one the other hosts do not share.
// The address this node is reached at in the rendezvous is known to work.
//
// Thread-safety: a pure function of the host's interfaces.
#pragma once

#include <optional>
#include <string>

namespace ddprun::agent {

// The name of the interface that holds `address` (numeric IPv4 or IPv6),
// or nullopt when none does or it is a loopback interface.
std::optional<std::string> interfaceWithAddress(const std::string& address);

}  // namespace ddprun::agent
