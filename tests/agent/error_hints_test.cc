#include "ddprun/agent/features/failure_report/error_hints.h"

#include <gtest/gtest.h>

namespace ddprun::agent {
namespace {

TEST(ErrorHints, ATakenPortNamesThePort) {
  WorkerFailure failure;
  failure.stderrTail = {
      "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
      "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
      "address already in use"};
  EXPECT_TRUE(errorHint(failure).starts_with("port 29500 is taken by another process"));
}

TEST(ErrorHints, LightningsDevicesThatDoNotMakeTheWorldSize) {
  WorkerFailure failure;
  failure.error = WorkerError{};
  failure.error->message =
      "ValueError: You set `devices=1` and `num_nodes=1` in Lightning, but the product (1 * 1) "
      "does not match the world size (2).";
  EXPECT_EQ(errorHint(failure),
            "Lightning's Trainer(devices=1, num_nodes=1) expects 1 processes but the job has 2: "
            "give devices = --nproc_per_node and num_nodes = --nnodes (docs/frameworks.md)");
}

TEST(ErrorHints, OtherFailuresHaveNone) {
  WorkerFailure failure;
  failure.stderrTail = {"RuntimeError: CUDA out of memory"};
  EXPECT_EQ(errorHint(failure), "");
}

}  // namespace
}  // namespace ddprun::agent
