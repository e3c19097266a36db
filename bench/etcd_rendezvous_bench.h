// EtcdRendezvousBenchmark: how long one rendezvous round takes for N nodes
// over etcd (--rdzv_backend=etcd), against a fresh 3-member etcd cluster on
// loopback. Each simulated node is a real EtcdRendezvous (its lease, alive
// key, watch and thread, on a thread of its own); the time is from the
// moment every node starts to connect (lease, alive key, watch) to the last
// one holding its assignment: what a user waits for. Per round it also
// counts each node's gateway requests and watch events.
//
// Thread-safety: run from one thread (it starts one thread per node).
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
