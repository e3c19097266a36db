// EtcdRendezvousBenchmark: how long one rendezvous round takes for N nodes
// over etcd (--rdzv_backend=etcd), against a fresh 3-member etcd cluster on
// loopback (etcd's default raft timing). Each simulated node is a real
// EtcdRendezvous (its lease, watch, alive key and thread, on a thread of
// its own), in child processes of at most 1,024 nodes each, as real nodes
// are separate processes with their own descriptor limits; the leases are
// renewed as agents renew them. The time is from the moment every node
// starts to connect to the last one holding its assignment: what a user
// waits for. Per round it also counts each node's gateway requests and
// watch events, and the CPU the etcd members and the nodes spent.
//
// Thread-safety: run from one thread (it forks the node processes before
// any thread of its own starts).
#pragma once

#include <ostream>
#include <vector>

#include "rendezvous_benchmark.h"

namespace ddprun::bench {

std::vector<RendezvousResult> runEtcdRendezvousBenchmark(const RendezvousBenchOptions& options,
                                                         std::ostream& log);

// The c10d and etcd medians side by side, with their ratio.
void printBackendComparison(const std::vector<RendezvousResult>& c10d,
                            const std::vector<RendezvousResult>& etcd, std::ostream& out);

}  // namespace ddprun::bench
