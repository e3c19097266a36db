// Debian's libtorch-dev 1.13 installs c10d/reducer.hpp but not the
// distributed-autograd headers it includes. reducer.hpp needs only two
// names from this one: DistAutogradContext::GradCallback (for a
// static_assert) and ContextPtr (a shared_ptr it stores). Neither changes
// c10d::Reducer's layout, so declaring them is enough to use the Reducer
// that libtorch exports. worker_lib/CMakeLists.txt adds this directory to
// the include path only when the real header is missing.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
