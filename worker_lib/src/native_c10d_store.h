// NativeC10dStore: LibTorch's c10d::Store interface over ddprun's
// authenticated store client, so c10d's process groups (ProcessGroupGloo,
// ProcessGroupNCCL) bootstrap through the job's ddprun store with the
// worker credential, as they would through a TCPStore.
//
// Errors from ddprun's client (TimeoutError, NetworkError, ...) become
// c10::Error with the same text, which is what c10d expects of a store.
//
// Thread-safety: as the wrapped store (StoreClient: any thread).
// Ownership: shares ownership of the wrapped store (and whatever keeps it
// alive: the client, a hosted daemon).
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/rendezvous/store.h"

namespace ddprun::worker {

class NativeC10dStore : public c10d::Store {
 public:
  NativeC10dStore(std::shared_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout);

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
  // c10d (2.7+) clones a store for another thread (NCCL's monitor): the
  // wrapped client serves any thread, so a clone shares it.
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<rendezvous::Store> store_;
};

}  // namespace ddprun::worker
