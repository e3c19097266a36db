// Built against an installed ddprun: two ranks all-reduce through spawn().
#include <ATen/ATen.h>

#include <cstdio>

#include "ddprun/worker/process_group.h"
#include "ddprun/worker/spawn.h"

int main() {
  ddprun::worker::spawn(2, [](int rank) {
    auto group = ddprun::worker::initProcessGroup();
    auto t = at::full({4}, rank + 1.0);
    group->allReduce(t);
    if (t[0].item<double>() != 3.0) throw std::runtime_error("wrong sum");
    if (rank == 0) std::printf("consumer: all_reduce over %d ranks = %g\n", group->size(), 3.0);
  });
  return 0;
}
