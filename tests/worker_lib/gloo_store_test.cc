// Gloo bootstraps through ddprun's store and runs a real all-reduce.
#include "ddprun/worker/gloo_store.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>

#include <thread>

#include "ddprun/rendezvous/store_client.h"
#include "ddprun/rendezvous/store_server.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

TEST(GlooStore, TwoRanksAllReduceOverTheStore) {
  rendezvous::StoreServerOptions serverOptions;
  serverOptions.token = "gloo";
  rendezvous::StoreServer server(serverOptions);
  server.start();
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      rendezvous::StoreClientOptions options;
      options.port = server.port();
      options.token = "gloo";
      rendezvous::StoreClient client(options);
      rendezvous::PrefixStore attempt(client, "job/attempt_0/");
      GlooStore store(attempt, 30s);
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
      context->connectFullMesh(store, device);
      std::vector<float> data(1000, static_cast<float>(rank + 1));
      gloo::AllreduceOptions opts(context);
      opts.setOutput(data.data(), data.size());
      void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      opts.setReduceFunction(sum);
      gloo::allreduce(opts);
      results[rank] = data;
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& r : results) {
    ASSERT_EQ(r.size(), 1000u);
    EXPECT_EQ(r.front(), 3.0f);
    EXPECT_EQ(r.back(), 3.0f);
  }
}

}  // namespace
}  // namespace ddprun::worker
