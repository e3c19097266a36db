// The mpi backend: LibTorch's ProcessGroupMPI. Where the linked LibTorch has
// it (Debian 13's 2.6), ctest runs this binary under mpirun with 3 ranks
// (Torch26.Worker.mpi) and every rank checks collectives, a subgroup, DDP
// and Join against values computed locally; where it has not (Debian 12's
// 1.13), initProcessGroup must refuse the backend and say why.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "ddprun/common/error.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/join.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<ProcessGroup> world() {
  static auto group = initProcessGroup({Backend::kMpi, 60s});
  return group;
}

TEST(Mpi, WithoutAnMpiLibTorchTheBackendIsRefused) {
  if (mpiAvailable()) {
    EXPECT_EQ(parseBackend("mpi"), Backend::kMpi);
    return;  // the collectives below run instead
  }
  try {
    initProcessGroup({Backend::kMpi, 5s});
    FAIL() << "the mpi backend was accepted by a LibTorch without MPI";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no MPI process group"), std::string::npos) << e.what();
  }
}

TEST(Mpi, RankAndSizeComeFromMpi) {
  if (!mpiAvailable()) return;  // refused above
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr) << "run this test under mpirun (ctest's Torch26.Worker.mpi does)";
  EXPECT_EQ(world()->size(), std::atoi(size));
  EXPECT_EQ(world()->rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(world()->backend(), Backend::kMpi);
  EXPECT_EQ(world()->environment().localRank, std::atoi(std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")));
  EXPECT_EQ(world()->environment().nodeRank, 0);  // one host
}

TEST(Mpi, CollectivesMatchALocalReference) {
  if (!mpiAvailable()) return;
  auto& g = *world();
  const int n = g.size();
  const int r = g.rank();
  auto mine = [&](int rank) { return torch::arange(4, torch::kDouble) + 10 * rank; };
  auto sum = torch::zeros({4}, torch::kDouble);
  for (int k = 0; k < n; ++k) sum += mine(k);

  auto t = mine(r);
  g.allReduce(t);
  EXPECT_TRUE(torch::equal(t, sum));
  t = mine(r);
  g.allReduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(torch::allclose(t, sum / n));
  t = mine(r);
  g.allReduce(t, ReduceOp::kMax);
  EXPECT_TRUE(torch::equal(t, mine(n - 1)));

  t = mine(r);
  g.broadcast(t, n - 1);
  EXPECT_TRUE(torch::equal(t, mine(n - 1)));

  const auto gathered = g.allGather(mine(r));
  for (int k = 0; k < n; ++k) EXPECT_TRUE(torch::equal(gathered[k], mine(k)));

  std::vector<at::Tensor> inputs;
  for (int k = 0; k < n; ++k) inputs.push_back(mine(r) * (k + 1));
  auto out = torch::zeros({4}, torch::kDouble);
  g.reduceScatter(out, inputs);
  EXPECT_TRUE(torch::equal(out, sum * (r + 1)));

  if (n >= 2) {
    if (r == 0) {
      auto message = torch::full({3}, 7.0);
      g.send(message, 1, 5);
    } else if (r == 1) {
      auto message = torch::zeros({3});
      g.recv(message, 0, 5);
      EXPECT_TRUE(torch::equal(message, torch::full({3}, 7.0)));
    }
  }
  g.barrier();
  EXPECT_EQ(g.allGatherBytes("rank " + std::to_string(r))[0], "rank 0");
}

TEST(Mpi, SubgroupsAreCommunicatorsOfTheWorld) {
  if (!mpiAvailable()) return;
  auto& g = *world();
  std::vector<int> evens;
  for (int k = 0; k < g.size(); k += 2) evens.push_back(k);
  auto sub = g.newGroup(evens);
  ASSERT_EQ(sub != nullptr, g.rank() % 2 == 0);
  if (!sub) return;
  auto t = torch::full({1}, static_cast<double>(g.rank()), torch::kDouble);
  sub->allReduce(t);
  double expected = 0;
  for (int k : evens) expected += k;
  EXPECT_EQ(t.item<double>(), expected);
  EXPECT_EQ(sub->globalRank(sub->rank()), g.rank());
}

// DDP over MPI, with uneven inputs under Join: every rank ends with the
// model one process computes from the same batches.
TEST(Mpi, DdpWithJoinMatchesOneProcess) {
  if (!mpiAvailable()) return;
  auto group = world();
  const int n = group->size();
  const int r = group->rank();
  torch::manual_seed(5);
  const auto x = torch::randn({3 * n * 4, 5});
  const auto y = x.sum(1, true).sin();
  auto rows = [&](int step, int rank) {
    return torch::indexing::Slice((step * n + rank) * 4, (step * n + rank + 1) * 4);
  };
  auto steps = [](int rank) { return rank == 0 ? 1 : 3; };
  auto make = [] {
    torch::manual_seed(1);
    return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::Tanh(),
                                 torch::nn::Linear(8, 1));
  };
  auto net = make();
  DistributedDataParallel ddp(net.ptr(), group);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  {
    Join join(ddp);
    for (int step = 0; step < steps(r); ++step) {
      sgd.zero_grad();
      torch::mse_loss(net->forward(x.index({rows(step, r)})), y.index({rows(step, r)})).backward();
      sgd.step();
    }
    join.finish();
  }
  auto reference = make();
  torch::optim::SGD referenceSgd(reference->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    referenceSgd.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int k = 0; k < n; ++k) {
      if (steps(k) > step) {
        loss = loss + torch::mse_loss(reference->forward(x.index({rows(step, k)})),
                                      y.index({rows(step, k)}));
      }
    }
    (loss / n).backward();
    referenceSgd.step();
  }
  for (std::size_t i = 0; i < net->parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6))
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace ddprun::worker
