#include "ddprun/worker/gloo_store.h"

namespace ddprun::worker {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = store_.get(key, timeout_);
  return {value.begin(), value.end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_.wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  store_.wait(keys, timeout);
}

}  // namespace ddprun::worker
